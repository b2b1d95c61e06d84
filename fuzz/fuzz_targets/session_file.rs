//! A whole session file through `read_session` (header, upgrades of version 1
//! and 2 files, torn tails, blank lines, line numbers). Invariants: no panic;
//! only `invalid_session` / `invalid_entry` errors from memory; on success the
//! counts add up and, for version 3, every entry is an exact line of the file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sessiontree::backend::jsonl::read_session;
use sessiontree::ErrorCode;
use std::io::Cursor;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let mut entries = Vec::new();
    let result = read_session(Cursor::new(data), Path::new("fuzz.jsonl"), |_, e| {
        entries.push(e);
        Ok(())
    });
    match result {
        Ok(summary) => {
            assert_eq!(summary.entries as usize, entries.len());
            assert_eq!(summary.bytes, data.len() as u64);
            assert!(summary.complete_bytes <= summary.bytes);
            assert!(
                summary.lines as usize > entries.len(),
                "the header is a line"
            );
            if let Some(t) = &summary.torn_tail {
                assert_eq!(t.offset + t.len, summary.bytes, "a torn tail is the end");
            }
            if summary.header.version == 3 {
                let text = String::from_utf8_lossy(data);
                for e in &entries {
                    assert!(
                        text.contains(e.json()),
                        "a stored entry is a line of the file"
                    );
                }
            }
        }
        Err(e) => assert!(
            matches!(
                e.code(),
                ErrorCode::InvalidSession | ErrorCode::InvalidEntry
            ),
            "unexpected error code {:?}: {e}",
            e.code()
        ),
    }
});
