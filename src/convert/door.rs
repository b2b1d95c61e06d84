//! The door import reads through: only regular files are opened (a FIFO
//! named `*.jsonl` would block forever, a link to `/dev/zero` never ends),
//! and no line may grow past a cap (memory holds a line at a time, so a
//! line is what bounds it).

use crate::error::{Error, Result};
use std::fs::File;
use std::io::{BufRead, Read};
use std::path::Path;

/// The longest line import reads, in bytes: pi 1.6 holds a line in one
/// JavaScript string, which V8 caps at 2^29 − 24 characters, so no line
/// pi can read is refused. `SESSIONTREE_MAX_LINE_MB` lowers or raises it.
pub const MAX_LINE_BYTES: u64 = 512 << 20;

/// The line cap in force: [`MAX_LINE_BYTES`], or `SESSIONTREE_MAX_LINE_MB`.
pub fn max_line_bytes() -> u64 {
    std::env::var("SESSIONTREE_MAX_LINE_MB")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(MAX_LINE_BYTES, |mb| mb.saturating_mul(1 << 20).max(1))
}

/// Refuses `path` unless it is (or links to) a regular file: a FIFO, a
/// device, a socket or a directory is `invalid_session`, naming it, before
/// anything opens it.
pub fn admit(path: &Path) -> Result<()> {
    let meta = std::fs::metadata(path)
        .map_err(|e| Error::io(format!("Failed to read session {}", path.display()), e))?;
    if meta.is_file() {
        return Ok(());
    }
    let what = {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileTypeExt;
            let t = meta.file_type();
            if t.is_fifo() {
                "a FIFO"
            } else if t.is_char_device() || t.is_block_device() {
                "a device"
            } else if t.is_socket() {
                "a socket"
            } else if t.is_dir() {
                "a directory"
            } else {
                "not a regular file"
            }
        }
        #[cfg(not(unix))]
        {
            "not a regular file"
        }
    };
    Err(Error::InvalidHeader {
        path: path.to_owned(),
        reason: format!("it is {what}; import reads only regular files"),
    })
}

/// Opens `path` for reading if [`admit`] lets it in.
pub fn open_regular(path: &Path) -> Result<File> {
    admit(path)?;
    File::open(path).map_err(|e| Error::io(format!("Failed to read session {}", path.display()), e))
}

/// A reader that fails (`InvalidData`, naming the line) once a line runs
/// past `cap` bytes without a `\n`, instead of growing the line's buffer
/// without bound.
pub struct LineCap<R> {
    inner: R,
    cap: u64,
    /// Bytes handed out since the last `\n`.
    run: u64,
    /// The line being read (1-based, physical lines from where reading began).
    line: u64,
}

impl<R> LineCap<R> {
    /// Caps `inner`'s lines at [`max_line_bytes`]; `lines_before` lines
    /// precede where it starts (for the line number an error names).
    pub fn new(inner: R, lines_before: u64) -> Self {
        LineCap {
            inner,
            cap: max_line_bytes(),
            run: 0,
            line: lines_before + 1,
        }
    }

    fn too_long(&self) -> std::io::Error {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "line {} is longer than {} MB, the most a line may hold (pi cannot read it either; SESSIONTREE_MAX_LINE_MB raises the cap)",
                self.line,
                self.cap >> 20
            ),
        )
    }
}

impl<R: BufRead> Read for LineCap<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(buf.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for LineCap<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        if self.run > self.cap {
            return Err(self.too_long());
        }
        self.inner.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        if let Ok(buf) = self.inner.fill_buf() {
            let taken = &buf[..amt.min(buf.len())];
            match memchr::memrchr(b'\n', taken) {
                Some(last) => {
                    self.line += memchr::memchr_iter(b'\n', taken).count() as u64;
                    self.run = (taken.len() - last - 1) as u64;
                }
                None => self.run += taken.len() as u64,
            }
        }
        self.inner.consume(amt);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_past_the_cap_fails_naming_it_and_shorter_lines_pass() {
        let text = b"a\nbb\nccccccccccccc\nd\n".to_vec();
        let mut capped = LineCap {
            inner: std::io::BufReader::with_capacity(4, &text[..]),
            cap: 8,
            run: 0,
            line: 1,
        };
        let mut lines = Vec::new();
        let err = loop {
            let mut line = Vec::new();
            match capped.read_until(b'\n', &mut line) {
                Ok(0) => panic!("the long line passed"),
                Ok(_) => lines.push(line),
                Err(e) => break e,
            }
        };
        assert_eq!(lines, vec![b"a\n".to_vec(), b"bb\n".to_vec()]);
        assert!(err.to_string().contains("line 3 "), "{err}");
        let mut fine = LineCap {
            inner: std::io::BufReader::with_capacity(4, &text[..]),
            cap: 13,
            run: 0,
            line: 1,
        };
        let mut all = Vec::new();
        fine.read_to_end(&mut all)
            .expect("every line within the cap");
        assert_eq!(all, text);
    }
}
