//! zstd frames as entries store them: zstd's magicless format (a frame
//! without its 4-byte magic number), compressed and decompressed through a
//! context each thread keeps, and refused before allocating when a damaged
//! header claims more than a frame of its size can hold.

use super::dictionary::Dictionary;
use crate::error::{Error, Result};
use std::cell::RefCell;
use zstd::zstd_safe;

/// The zstd level entries are compressed at as they are written (fast
/// enough for a bulk import on the reader thread); `compact` chooses its
/// own (`CompactOptions`).
pub const LEVEL: i32 = 3;

/// zstd's magic number, which the stored (magicless) frames leave out.
pub(super) const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];
/// The longest zstd frame header (`ZSTD_FRAMEHEADERSIZE_MAX`).
pub(super) const MAX_FRAME_HEADER: usize = 18;

thread_local! {
    /// One decompression context per thread (creating one per entry costs
    /// more than decompressing a small entry), reading magicless frames.
    static DCTX: RefCell<Option<zstd_safe::DCtx<'static>>> = const { RefCell::new(None) };
    /// One compression context per thread, with the dictionary (by serial)
    /// and level it has loaded: loading a dictionary builds its tables once.
    static CCTX: RefCell<((u64, i32), zstd_safe::CCtx<'static>)> = RefCell::new(((u64::MAX, 0), zstd_safe::CCtx::create()));
}

fn zstd_error(what: &str, code: usize) -> Error {
    Error::Corrupt(format!("{what}: {}", zstd_safe::get_error_name(code)))
}

pub(super) fn decompress(payload: &[u8], dictionary: Option<&Dictionary>) -> Result<Vec<u8>> {
    decompress_sized(payload, dictionary, None)
}

/// The largest zstd block.
pub(super) const MAX_BLOCK_BYTES: usize = 128 << 10;

/// The content size a magicless frame's header states: zstd reads sizes
/// only from framed headers, so the header (at most
/// [`MAX_FRAME_HEADER`] bytes) is framed on the stack, never the payload.
pub(super) fn frame_content_size(payload: &[u8]) -> Option<u64> {
    let mut header = [0u8; 4 + MAX_FRAME_HEADER];
    let len = payload.len().min(MAX_FRAME_HEADER);
    header[..4].copy_from_slice(&ZSTD_MAGIC);
    header[4..4 + len].copy_from_slice(&payload[..len]);
    zstd_safe::get_frame_content_size(&header[..4 + len])
        .ok()
        .flatten()
}

/// Decompresses a stored (magicless) frame, refusing before it allocates a
/// frame that does not say it holds exactly `expected` bytes (when given).
pub(super) fn decompress_sized(
    payload: &[u8],
    dictionary: Option<&Dictionary>,
    expected: Option<usize>,
) -> Result<Vec<u8>> {
    let size = match frame_content_size(payload) {
        Some(n) => {
            usize::try_from(n).map_err(|_| Error::Corrupt("a stored entry is too large".into()))?
        }
        None => {
            return Err(Error::Corrupt(
                "a stored entry's zstd frame has no size".into(),
            ))
        }
    };
    if expected.is_some_and(|e| e != size) {
        return Err(Error::Corrupt(format!(
            "a stored entry's zstd frame claims {size} bytes where {} are expected",
            expected.unwrap_or_default()
        )));
    }
    // A zstd block of at most 128 KB takes at least 4 bytes (an RLE block),
    // so no frame decodes to more than this: a damaged header claiming more
    // is an error, not an allocation that aborts the process.
    if size > payload.len().saturating_mul(MAX_BLOCK_BYTES / 4) + MAX_BLOCK_BYTES {
        return Err(Error::Corrupt(format!(
            "a stored entry's zstd frame claims {size} bytes from {} stored",
            payload.len()
        )));
    }
    let mut out = Vec::with_capacity(size);
    DCTX.with(|d| {
        let mut d = d.borrow_mut();
        let d = match &mut *d {
            Some(d) => d,
            None => {
                let mut fresh = zstd_safe::DCtx::create();
                fresh
                    .set_parameter(zstd_safe::DParameter::Format(
                        zstd_safe::FrameFormat::Magicless,
                    ))
                    .map_err(|c| zstd_error("setting up zstd", c))?;
                d.insert(fresh)
            }
        };
        match dictionary {
            Some(dict) => d.decompress_using_ddict(&mut out, payload, &dict.ddict),
            None => d.decompress(&mut out, payload),
        }
        .map_err(|c| zstd_error("a stored entry does not decompress", c))
    })?;
    if out.len() != size {
        return Err(Error::Corrupt(
            "a stored entry decompressed to the wrong size".into(),
        ));
    }
    Ok(out)
}

/// Compresses `data` into a magicless frame, or `None` if zstd fails.
pub(super) fn compress(
    data: &[u8],
    dictionary: Option<&Dictionary>,
    level: i32,
) -> Option<Vec<u8>> {
    CCTX.with(|c| {
        let mut c = c.borrow_mut();
        let loaded = (dictionary.map_or(0, |d| d.serial), level);
        if c.0 != loaded {
            let cctx = &mut c.1;
            cctx.reset(zstd_safe::ResetDirective::SessionAndParameters)
                .ok()?;
            cctx.set_parameter(zstd_safe::CParameter::CompressionLevel(level))
                .ok()?;
            cctx.set_parameter(zstd_safe::CParameter::ChecksumFlag(false))
                .ok()?;
            cctx.set_parameter(zstd_safe::CParameter::ContentSizeFlag(true))
                .ok()?;
            cctx.set_parameter(zstd_safe::CParameter::DictIdFlag(false))
                .ok()?;
            cctx.set_parameter(zstd_safe::CParameter::Format(
                zstd_safe::FrameFormat::Magicless,
            ))
            .ok()?;
            // Attached, never copied: above a size (32 KB at `compact`'s
            // greedy levels) zstd copies the dictionary's tables into the
            // context for every frame, and a block of up to 64 KB paid
            // that copy each time (9 % of a `compact`'s CPU on a 98 MB pi
            // home, `perf record`); attached, frames read the dictionary's
            // tables where they are.
            cctx.set_parameter(zstd_safe::CParameter::ForceAttachDict(
                zstd_safe::DictAttachPref::ForceAttach,
            ))
            .ok()?;
            cctx.load_dictionary(dictionary.map_or(&[][..], |d| &d.bytes))
                .ok()?;
            c.0 = loaded;
        }
        let mut out = Vec::with_capacity(zstd_safe::compress_bound(data.len()));
        if c.1.compress2(&mut out, data).is_err() {
            c.0 = (u64::MAX, 0);
            return None;
        }
        Some(out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_claiming_more_than_zstd_can_hold_is_an_error_not_an_abort() {
        // Highly compressible text still decodes (an RLE-like 4 MB run).
        let big = vec![b'a'; 4 << 20];
        let frame = zstd::bulk::compress(&big, 3).unwrap();
        assert_eq!(decompress_sized(&frame[4..], None, None).unwrap(), big);
        // The same frame with its content size rewritten to 2^40 bytes.
        let mut header = zstd::bulk::compress(b"abc", 3).unwrap();
        let descriptor = header[4];
        header[4] = (descriptor & 0x3f) | 0xc0; // an 8-byte content size
        let field = 5 + usize::from(descriptor & 0x20 == 0); // window byte
        let old = match descriptor >> 6 {
            0 => 1,
            1 => 2,
            2 => 4,
            _ => 8,
        };
        header.splice(field..field + old, (1u64 << 40).to_le_bytes());
        let err = decompress_sized(&header[4..], None, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("claims 1099511627776 bytes"), "{err}");
    }
}
