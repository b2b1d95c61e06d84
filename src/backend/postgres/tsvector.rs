//! A message's search words as a `tsvector` built here and sent in
//! PostgreSQL's binary form, so the server stores it without parsing text:
//! parsing the text form (`'word':3 'next':4 …`, one item per token) was
//! most of the server's work in a bulk sync.
//!
//! The value is the one `CAST(words AS tsvector)` gives for the text
//! [`crate::search::index_words`] writes (`tests/postgres.rs` compares the
//! two on the server): lexemes unique and in byte order, each with its
//! positions ascending, a position past PostgreSQL's last (16,383) clamped
//! to it, and at most 256 positions a lexeme, as `tsvectorin` keeps them.
//! Built by one sort of the message's tokens, written straight into the
//! wire layout (no map, no allocation per lexeme).

use bytes::BufMut;
use postgres::types::{to_sql_checked, IsNull, ToSql, Type};

/// PostgreSQL's last word position (`MAXENTRYPOS - 1`).
const LAST_POSITION: u16 = (1 << 14) - 1;
/// Positions a lexeme keeps at most (`MAXNUMPOS`).
const MAX_POSITIONS: usize = 256;

/// A `tsvector` value, held in `tsvectorsend`'s layout: the lexeme count,
/// then each lexeme (in byte order, unique) as a NUL-terminated string, its
/// position count and its positions (weight D: the top bits clear), all
/// big-endian.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TsVector {
    lexemes: u32,
    body: Vec<u8>,
}

impl TsVector {
    /// The `tsvector` of `words`, the text [`crate::search::index_words`]
    /// writes: `'lexeme':position` items separated by spaces, a lexeme
    /// holding no quote (the writer's rule), positions rising.
    pub fn from_index_words(words: &str) -> Self {
        let mut items: Vec<(&[u8], u16)> = Vec::new();
        let mut rest = words.as_bytes();
        while let Some(open) = memchr::memchr(b'\'', rest) {
            let after = &rest[open + 1..];
            let Some(close) = memchr::memchr(b'\'', after) else {
                break;
            };
            // `':` then the decimal position.
            let digits = after.get(close + 2..).unwrap_or_default();
            let len = digits.iter().take_while(|b| b.is_ascii_digit()).count();
            let position = digits[..len].iter().fold(0u32, |n, d| {
                n.saturating_mul(10).saturating_add(u32::from(d - b'0'))
            });
            let position = u16::try_from(position)
                .unwrap_or(u16::MAX)
                .min(LAST_POSITION);
            items.push((&after[..close], position));
            rest = &digits[len..];
        }
        // By lexeme, then position: the order a stable sort by lexeme gives
        // (positions come in rising), from the unstable sort, which moves
        // less (this sort was about a tenth of a sync's client time).
        items.sort_unstable();
        let mut v = TsVector {
            lexemes: 0,
            body: Vec::with_capacity(words.len()),
        };
        let mut i = 0;
        while i < items.len() {
            let lexeme = items[i].0;
            v.lexemes += 1;
            v.body.put_slice(lexeme);
            v.body.put_u8(0);
            let count_at = v.body.len();
            v.body.put_u16(0);
            let mut kept: u16 = 0;
            let mut last: Option<u16> = None;
            while i < items.len() && items[i].0 == lexeme {
                let p = items[i].1;
                // As `tsvectorin` keeps them: a repeat once, none after the
                // 256th or after the last position.
                let full = usize::from(kept) >= MAX_POSITIONS || last == Some(LAST_POSITION);
                if !full && last != Some(p) {
                    v.body.put_u16(p);
                    kept += 1;
                    last = Some(p);
                }
                i += 1;
            }
            v.body[count_at..count_at + 2].copy_from_slice(&kept.to_be_bytes());
        }
        v
    }

    /// Whether it holds no lexeme.
    pub fn is_empty(&self) -> bool {
        self.lexemes == 0
    }
}

impl ToSql for TsVector {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut bytes::BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.put_i32(i32::try_from(self.lexemes)?);
        out.put_slice(&self.body);
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::TS_VECTOR
    }

    to_sql_checked!();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lexemes(words: &str) -> Vec<(String, Vec<u16>)> {
        let v = TsVector::from_index_words(words);
        let mut out = Vec::new();
        let mut b = &v.body[..];
        while !b.is_empty() {
            let nul = b.iter().position(|&c| c == 0).unwrap();
            let lexeme = String::from_utf8(b[..nul].to_vec()).unwrap();
            let n = usize::from(u16::from_be_bytes([b[nul + 1], b[nul + 2]]));
            let positions = (0..n)
                .map(|j| u16::from_be_bytes([b[nul + 3 + 2 * j], b[nul + 4 + 2 * j]]))
                .collect();
            out.push((lexeme, positions));
            b = &b[nul + 3 + 2 * n..];
        }
        assert_eq!(out.len(), v.lexemes as usize);
        out
    }

    #[test]
    fn lexemes_are_unique_in_byte_order_with_their_positions() {
        assert_eq!(
            lexemes("'the':1 'cat':2 'the':3 'ab':4 'a':5"),
            [
                ("a".into(), vec![5]),
                ("ab".into(), vec![4]),
                ("cat".into(), vec![2]),
                ("the".into(), vec![1, 3]),
            ]
        );
        assert!(TsVector::from_index_words("").is_empty());
    }

    #[test]
    fn positions_clamp_and_stop_where_postgresql_stops() {
        let many: Vec<String> = (1..=20_000).map(|i| format!("'w':{i}")).collect();
        let v = lexemes(&many.join(" "));
        assert_eq!(v[0].1.len(), MAX_POSITIONS);
        let late: Vec<String> = (16_380..=16_390).map(|i| format!("'w':{i}")).collect();
        assert_eq!(
            lexemes(&late.join(" "))[0].1,
            [16_380, 16_381, 16_382, 16_383]
        );
    }
}
