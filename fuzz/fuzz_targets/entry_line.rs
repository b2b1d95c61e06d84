//! One stored line: `Entry::from_stored_line` (what the reader runs on every
//! line of a session file) and `Entry::from_json` (what appends run).
//! Invariants: no panic; an accepted line keeps its exact text and re-parses
//! to the same facts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sessiontree::Entry;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(e) = Entry::from_stored_line(&text) {
        assert_eq!(e.json(), &*text, "a stored line is kept byte for byte");
        let again = Entry::from_stored_line(e.json()).expect("an accepted line re-parses");
        assert_eq!(again.facts(), e.facts());
        assert!(!e.id().is_empty() && !e.timestamp().is_empty());
        let _ = e.value();
        let _ = e.facts().leaf_after();
        let _ = e.facts().label_update();
        let _ = e.facts().session_name_update();
    }
    if let Ok(e) = Entry::from_json(&text) {
        assert!(!e.json().contains('\n'), "an appended entry is one line");
        let again = Entry::from_stored_line(e.json()).expect("a compacted entry re-parses");
        assert_eq!(again.facts(), e.facts());
    }
});
