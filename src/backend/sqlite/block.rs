//! Blocks: a run of a session's entries compressed together (schema version
//! 11). Compressed one by one, an entry cannot use what its parent already
//! said (the tool call its result answers, code quoted again); packed in
//! runs of up to [`BLOCK_ENTRIES`], a generated 100,000-entry forked
//! session's stored text is 15 % smaller (23.8 → 20.1 MB). Only `compact`
//! packs; appends and imports store each entry alone ([`super::codec`]).
//!
//! The bounds trade reads for size: a block is decoded whole, so reading one
//! entry out of order decodes up to [`BLOCK_BYTES`] (a path read decodes
//! each block once); on that session blocks of up to 32 and 64 entries
//! left the archive at 37.50 and 37.26 MB at level 16 (entries alone: 40.8).
//!
//! # Invariants
//! 1. **Ids never reused.** A block's id comes from `entry_blocks`
//!    (AUTOINCREMENT; a row never changes), and `compact` gives every block
//!    it writes a new one, so a decoded block kept by id is never stale once
//!    its rows are committed. The blocks a thread keeps
//!    (`member_text`, [`KEPT_BLOCKS`]) come only from committed rows: `compact` checks the
//!    blocks it writes with [`unpack`], which keeps nothing.
//! 2. **A run of one session, side by side.** The members of a block are
//!    consecutive rows of `entries` (entry-key order, from
//!    `entry_blocks.head_key`) of the block's session, each (after the first) the child of the one before, so a path
//!    read decodes each block once and reading the pieces is one range scan.
//!    A member holds no out-of-line blob.
//! 3. **Bounded.** A block holds at most [`BLOCK_ENTRIES`] entries and
//!    [`BLOCK_BYTES`] of text, so reading one entry decodes at most that.
//!
//! # Member body (`entries.json`)
//! ```text
//! tag        u8      MEMBER, and TRAILING_MESSAGE if it holds for the text
//! block id   varint
//! index      varint  the member's place in the block
//! (member 0 only)
//!   flags    u8      bit 0: the payload is a zstd frame (magic dropped);
//!                    bit 1: a dictionary id follows
//!   dict id  varint  (bit 1)
//!   n        varint  members
//!   lengths  n × varint, each member's text length
//! piece      the member's share of the payload, in member order
//! ```
//! A block is cut in as many pieces as it has members so that rows stay as
//! dense as entries stored alone: a block in a row of its own left a quarter
//! of its pages empty (a record of ~3 KB per 4 KB page).

use super::codec::{self, Codec, Prepared, MEMBER};
use super::error::sql;
use crate::error::{Error, Result};
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection};
use std::cell::RefCell;
use std::ops::Range;

/// The most entries a block holds.
pub const BLOCK_ENTRIES: usize = 64;
/// The most text a block holds: reading one member decodes at most this.
pub const BLOCK_BYTES: usize = 64 << 10;

const COMPRESSED: u8 = 1;
const WITH_DICTIONARY: u8 = 2;

/// A member body, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member<'a> {
    /// `entry_blocks.block_id`.
    pub block: i64,
    /// The member's index in the block.
    pub index: usize,
    /// The block's header (member 0 only).
    pub header: Option<Header>,
    /// This member's piece of the payload.
    pub piece: &'a [u8],
}

/// A block's header, kept by its member 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Whether the payload is a zstd frame.
    pub compressed: bool,
    /// The dictionary it was compressed with.
    pub dictionary: Option<i64>,
    /// Each member's text length.
    pub lengths: Vec<usize>,
}

/// Whether a stored value is a member body.
pub fn is_member(value: ValueRef<'_>) -> bool {
    matches!(value, ValueRef::Blob(b) if b.first().is_some_and(|t| t & MEMBER != 0))
}

/// Whether a batch of rows (entry-key order) may end before a row whose
/// text is at `place` ([`place`]): not inside a block, so that a reader
/// between two commits finds every block whole, its members all old or all
/// new.
pub fn may_end_before(place: Option<(i64, usize)>) -> bool {
    !matches!(place, Some((_, index)) if index > 0)
}

/// Where a stored value's text is: (block id, index) for a member of a
/// block, `None` for an entry stored alone or a damaged body.
pub fn place(value: ValueRef<'_>) -> Option<(i64, usize)> {
    match value {
        ValueRef::Blob(b) if is_member(value) => parse_member(b).ok().map(|m| (m.block, m.index)),
        _ => None,
    }
}

/// Parses a member body.
pub(super) fn parse_member(body: &[u8]) -> Result<Member<'_>> {
    let bad = || Error::Corrupt("a stored entry has a damaged block reference".into());
    let (&tag, _) = body.split_first().ok_or_else(bad)?;
    if tag & !(MEMBER | codec::TRAILING_MESSAGE) != 0 || tag & MEMBER == 0 {
        return Err(Error::Corrupt(format!(
            "a stored entry uses encoding {tag:#x}, which no build writes"
        )));
    }
    let mut at = 1;
    let mut number = || {
        codec::read_varint(body, &mut at)
            .and_then(|v| i64::try_from(v).ok())
            .ok_or_else(bad)
    };
    let block = number()?;
    let index = number()? as usize;
    let header = if index == 0 {
        let flags = *body.get(at).ok_or_else(bad)?;
        at += 1;
        if flags & !(COMPRESSED | WITH_DICTIONARY) != 0 {
            return Err(Error::Corrupt(format!(
                "an entry block uses encoding {flags:#x}, newer than this build knows; upgrade sessiontree"
            )));
        }
        let mut number = || {
            codec::read_varint(body, &mut at)
                .and_then(|v| i64::try_from(v).ok())
                .ok_or_else(bad)
        };
        let dictionary = (flags & WITH_DICTIONARY != 0)
            .then(&mut number)
            .transpose()?;
        let n = number()?;
        if n < 1 || n > BLOCK_ENTRIES as i64 {
            return Err(bad());
        }
        let lengths = (0..n)
            .map(|_| number().map(|l| l as usize))
            .collect::<Result<Vec<_>>>()?;
        Some(Header {
            compressed: flags & COMPRESSED != 0,
            dictionary,
            lengths,
        })
    } else {
        None
    };
    Ok(Member {
        block,
        index,
        header,
        piece: &body[at..],
    })
}

/// Whether an entry's text may go in a block: short enough, and nothing of
/// it goes out of line (invariants 2 and 3).
pub fn may_join(text: &str) -> bool {
    text.len() <= BLOCK_BYTES && !codec::has_blobs(text)
}

/// The member bodies of block `block` for member texts of `lengths`
/// (`trails`: tag bit 3 for each) whose
/// concatenation the encoder prepared as `prepared`; `None` when
/// compression did not pay or the encoder cut something out (the members
/// are then stored alone).
pub fn member_bodies(
    prepared: &Prepared,
    block: i64,
    lengths: &[usize],
    trails: &[bool],
) -> Option<Vec<Vec<u8>>> {
    let Prepared::Encoded {
        dictionary,
        compressed: true,
        blobs,
        payload,
    } = prepared
    else {
        return None;
    };
    if !blobs.is_empty() || lengths.is_empty() || lengths.len() > BLOCK_ENTRIES {
        return None;
    }
    let n = lengths.len();
    let share = payload.len().div_ceil(n).max(1);
    let mut pieces = payload.chunks(share);
    let bodies = (0..n)
        .map(|index| {
            let piece = pieces.next().unwrap_or_default();
            let mut body = Vec::with_capacity(piece.len() + 12 + 3 * n);
            body.push(if trails[index] {
                MEMBER | codec::TRAILING_MESSAGE
            } else {
                MEMBER
            });
            codec::write_varint(&mut body, block as u64);
            codec::write_varint(&mut body, index as u64);
            if index == 0 {
                body.push(
                    COMPRESSED
                        | if dictionary.is_some() {
                            WITH_DICTIONARY
                        } else {
                            0
                        },
                );
                if let Some(d) = dictionary {
                    codec::write_varint(&mut body, *d as u64);
                }
                codec::write_varint(&mut body, n as u64);
                for &len in lengths {
                    codec::write_varint(&mut body, len as u64);
                }
            }
            body.extend_from_slice(piece);
            body
        })
        .collect();
    Some(bodies)
}

/// Whether `bodies` are block `block`'s member bodies, in order, for member
/// texts of `lengths`, holding `prepared`'s payload: what [`unpack`] reads
/// of them, checked without decompressing (`compact`'s worker decompressed
/// the payload to the members' joined text already).
pub fn assembles(bodies: &[&[u8]], block: i64, lengths: &[usize], prepared: &Prepared) -> bool {
    let Prepared::Encoded {
        dictionary,
        compressed: true,
        payload,
        ..
    } = prepared
    else {
        return false;
    };
    let Ok(members) = bodies
        .iter()
        .map(|b| parse_member(b))
        .collect::<Result<Vec<_>>>()
    else {
        return false;
    };
    let header_holds = members
        .first()
        .and_then(|m| m.header.as_ref())
        .is_some_and(|h| h.compressed && h.dictionary == *dictionary && h.lengths == lengths);
    let mut at = 0;
    header_holds
        && members.len() == lengths.len()
        && members.iter().enumerate().all(|(i, m)| {
            let fits = m.block == block
                && m.index == i
                && payload.get(at..at + m.piece.len()) == Some(m.piece);
            at += m.piece.len();
            fits
        })
        && at == payload.len()
}

/// A decoded block: the members' texts end to end.
#[derive(Debug)]
pub struct Unpacked {
    text: Vec<u8>,
    ranges: Vec<Range<usize>>,
}

impl Unpacked {
    /// Member `index`'s text.
    pub fn member(&self, index: usize) -> Option<&[u8]> {
        self.ranges.get(index).map(|r| &self.text[r.clone()])
    }

    /// How many members the block has.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }
}

/// Decodes a block from its member bodies, in order (keeping nothing: what
/// `compact` checks its new blocks with, before they are committed).
pub fn unpack(codec: &Codec, conn: &Connection, bodies: &[&[u8]]) -> Result<Unpacked> {
    let damaged = |what: &str| Error::Corrupt(format!("an entry block is damaged: {what}"));
    let members = bodies
        .iter()
        .map(|b| parse_member(b))
        .collect::<Result<Vec<_>>>()?;
    let first = members
        .first()
        .ok_or_else(|| damaged("it has no members"))?;
    let header = first
        .header
        .as_ref()
        .ok_or_else(|| damaged("its first member does not start it"))?;
    if members.len() != header.lengths.len() {
        return Err(damaged("it has another number of members than it says"));
    }
    // Invariant 3 bounds what a header may claim, before anything is
    // allocated for it.
    let total = header
        .lengths
        .iter()
        .try_fold(0usize, |sum, &len| sum.checked_add(len))
        .filter(|&total| total <= BLOCK_BYTES)
        .ok_or_else(|| damaged("its members claim more text than a block holds"))?;
    let mut payload = Vec::with_capacity(members.iter().map(|m| m.piece.len()).sum());
    for (i, m) in members.iter().enumerate() {
        if m.block != first.block || m.index != i {
            return Err(damaged("its members are out of place"));
        }
        payload.extend_from_slice(m.piece);
    }
    let text = if header.compressed {
        codec.inflate(conn, header.dictionary, &payload, Some(total))?
    } else {
        payload
    };
    let mut ranges = Vec::with_capacity(header.lengths.len());
    let mut at = 0usize;
    for &len in &header.lengths {
        let end = at
            .checked_add(len)
            .filter(|&e| e <= text.len())
            .ok_or_else(|| damaged("it is shorter than its members"))?;
        ranges.push(at..end);
        at = end;
    }
    if at != text.len() {
        return Err(damaged("it is longer than its members"));
    }
    Ok(Unpacked { text, ranges })
}

/// How many decoded blocks a thread keeps (at most [`BLOCK_BYTES`] each).
const KEPT_BLOCKS: usize = 8;

thread_local! {
    /// The blocks this thread decoded last, by (codec serial, block id),
    /// most recent first: a path read meets a block's members one after
    /// another (invariant 2); a search's hits and a tree's entries come
    /// back to a few blocks out of order.
    static KEPT: RefCell<std::collections::VecDeque<(u64, i64, Unpacked)>> =
        const { RefCell::new(std::collections::VecDeque::new()) };
}

/// A member's text, from a block this thread keeps or the archive.
pub(super) fn member_text(codec: &Codec, conn: &Connection, body: &[u8]) -> Result<Vec<u8>> {
    let member = parse_member(body)?;
    let key = (codec.serial(), member.block);
    let held = KEPT.with(|kept| {
        let mut kept = kept.borrow_mut();
        let at = kept
            .iter()
            .position(|(serial, block, _)| (*serial, *block) == key)?;
        if at > 0 {
            let found = kept.remove(at)?;
            kept.push_front(found);
        }
        kept.front()
            .map(|(_, _, unpacked)| unpacked.member(member.index).map(<[u8]>::to_vec))
    });
    let text = match held {
        Some(text) => text,
        None => {
            let unpacked = read(codec, conn, &member)?;
            let text = unpacked.member(member.index).map(<[u8]>::to_vec);
            KEPT.with(|kept| {
                let mut kept = kept.borrow_mut();
                kept.truncate(KEPT_BLOCKS - 1);
                kept.push_front((key.0, key.1, unpacked));
            });
            text
        }
    };
    text.ok_or_else(|| {
        Error::Corrupt(format!(
            "entry block {} has no member {}",
            member.block, member.index
        ))
    })
}

/// Reads and decodes `member`'s block: its rows from the head on, in one
/// statement, so the block and its rows come from one snapshot. The member
/// itself must come from that snapshot too: a caller decodes while the
/// statement that read it is live, or inside a read transaction — else a
/// `compact` committed in between has given its rows another block.
fn read(codec: &Codec, conn: &Connection, member: &Member<'_>) -> Result<Unpacked> {
    let mut st = conn
        .prepare_cached(
            "SELECT e.json FROM entry_blocks b JOIN entries e ON e.entry_key >= b.head_key
             WHERE b.block_id = ?1 ORDER BY e.entry_key LIMIT ?2",
        )
        .map_err(sql("reading an entry block"))?;
    let mut rows = st
        .query(params![member.block, BLOCK_ENTRIES as i64])
        .map_err(sql("reading an entry block"))?;
    let mut bodies: Vec<Vec<u8>> = Vec::with_capacity(BLOCK_ENTRIES);
    let mut members = None;
    while let Some(row) = rows.next().map_err(sql("reading an entry block"))? {
        let value = row.get_ref(0).map_err(sql("reading an entry block"))?;
        let body = match value {
            ValueRef::Blob(body) if is_member(value) => body,
            _ if bodies.is_empty() => return Err(misplaced(member.block)),
            _ => break,
        };
        if bodies.is_empty() {
            let head = parse_member(body)?;
            if head.block != member.block {
                return Err(misplaced(member.block));
            }
            members = head.header.map(|h| h.lengths.len());
        }
        bodies.push(body.to_vec());
        if Some(bodies.len()) == members {
            break;
        }
    }
    if bodies.is_empty() {
        return Err(Error::Corrupt(format!(
            "entry block {} is missing from the archive",
            member.block
        )));
    }
    let bodies: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
    unpack(codec, conn, &bodies)
}

fn misplaced(block: i64) -> Error {
    Error::Corrupt(format!("entry block {block} is not where its members say"))
}

/// A new block id for a block of `session` whose first member is entry `head`.
pub fn new_id(conn: &Connection, session: i64, head: i64) -> Result<i64> {
    conn.prepare_cached("INSERT INTO entry_blocks (session_key, head_key) VALUES (?1, ?2)")
        .and_then(|mut st| st.execute([session, head]))
        .map_err(sql("storing an entry block"))?;
    Ok(conn.last_insert_rowid())
}

/// Splits rows, in entry-key order, into runs that may share a block:
/// consecutive entries of one session, each the child of the one before,
/// each [`may_join`], within [`BLOCK_ENTRIES`] and [`BLOCK_BYTES`]. A row
/// that may not join is a run of its own.
pub fn runs<'a>(rows: impl ExactSizeIterator<Item = (i64, &'a str)>) -> Vec<Range<usize>> {
    /// What joining a run needs to know of a row.
    struct Joinable<'a> {
        session: i64,
        len: usize,
        /// Its `id` and `parentId` as written; `None` if it may not join.
        ids: Option<[Option<&'a str>; 2]>,
    }
    let rows: Vec<Joinable<'a>> = rows
        .map(|(session, text)| Joinable {
            session,
            len: text.len(),
            ids: may_join(text)
                .then(|| crate::json::checked_object_members(text, ["id", "parentId"]))
                .flatten(),
        })
        .collect();
    let mut out = Vec::new();
    let mut start = 0;
    let mut bytes = 0;
    for (i, row) in rows.iter().enumerate() {
        let continues = i > start && {
            let previous = &rows[i - 1];
            previous.session == row.session
                && i - start < BLOCK_ENTRIES
                && bytes + row.len <= BLOCK_BYTES
                && matches!(
                    (row.ids, previous.ids),
                    (Some([_, Some(parent)]), Some([Some(id), _])) if parent == id
                )
        };
        if i > start && !continues {
            out.push(start..i);
            start = i;
            bytes = 0;
        }
        bytes += row.len;
    }
    if start < rows.len() {
        out.push(start..rows.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(id: &str, parent: Option<&str>, text: &str) -> String {
        let parent = parent.map_or("null".to_string(), |p| format!("\"{p}\""));
        format!(
            r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"2025-01-01T00:00:00.000Z","message":{{"role":"user","content":"{text}"}}}}"#
        )
    }

    #[test]
    fn runs_follow_parent_chains_within_one_session_and_the_bounds() {
        let mut rows = vec![
            (1, line("a", None, "x")),
            (1, line("b", Some("a"), "x")),
            (1, line("c", Some("b"), "x")),
            // A sibling of c: a fork starts a new run.
            (1, line("d", Some("b"), "x")),
            // Another session, even with a matching parent id.
            (2, line("e", Some("d"), "x")),
            (2, line("f", Some("e"), &"y".repeat(BLOCK_BYTES))),
            (2, line("g", Some("f"), "x")),
        ];
        // A long chain is cut at BLOCK_ENTRIES.
        for i in 0..BLOCK_ENTRIES + 3 {
            let parent = if i == 0 {
                "g".to_string()
            } else {
                format!("h{}", i - 1)
            };
            rows.push((2, line(&format!("h{i}"), Some(&parent), "x")));
        }
        let found = runs(rows.iter().map(|(s, t)| (*s, t.as_str())));
        let f = 5; // the entry too long to join
        assert_eq!(
            found,
            vec![
                0..3,
                3..4,
                4..5,
                f..f + 1,
                f + 1..f + 1 + BLOCK_ENTRIES,
                f + 1 + BLOCK_ENTRIES..rows.len()
            ]
        );
    }

    #[test]
    fn runs_stop_at_the_byte_bound() {
        // Not base64 (a long base64 string would go out of line and not join).
        let big = "z ".repeat(BLOCK_BYTES / 6);
        let rows: Vec<(i64, String)> = (0..5)
            .map(|i| {
                let parent = (i > 0).then(|| format!("p{}", i - 1));
                (1, line(&format!("p{i}"), parent.as_deref(), &big))
            })
            .collect();
        let found = runs(rows.iter().map(|(s, t)| (*s, t.as_str())));
        // Three texts of a third each (plus their JSON) do not fit in one.
        assert_eq!(found, vec![0..2, 2..4, 4..5]);
    }

    #[test]
    fn a_damaged_member_or_block_is_an_error_not_a_panic() {
        let conn = Connection::open_in_memory().unwrap();
        let codec = Codec::default();
        let prepared = Prepared::Encoded {
            dictionary: None,
            compressed: true,
            blobs: Vec::new(),
            payload: zstd::bulk::compress(b"abcdef", 3).unwrap()[4..].to_vec(),
        };
        let bodies = member_bodies(&prepared, 300, &[1, 2, 3], &[true, false, true]).unwrap();
        let refs: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
        let unpacked = unpack(&codec, &conn, &refs).unwrap();
        assert_eq!(
            (0..3)
                .map(|i| unpacked.member(i).unwrap())
                .collect::<Vec<_>>(),
            [&b"a"[..], b"bc", b"def"]
        );
        assert_eq!(parse_member(&bodies[1]).unwrap().block, 300);
        // Truncated, reordered, missing or extra members; another block.
        assert!(parse_member(&[MEMBER]).is_err());
        assert!(unpack(&codec, &conn, &refs[..2]).is_err());
        assert!(unpack(&codec, &conn, &[refs[0], refs[2], refs[1]]).is_err());
        assert!(unpack(&codec, &conn, &[refs[1], refs[2]]).is_err());
        let other = member_bodies(&prepared, 301, &[1, 2, 3], &[false; 3]).unwrap();
        assert!(unpack(&codec, &conn, &[refs[0], refs[1], &other[2]]).is_err());
        // Lengths that do not add up to the text.
        let short = member_bodies(&prepared, 300, &[1, 2, 2], &[false; 3]).unwrap();
        let short: Vec<&[u8]> = short.iter().map(Vec::as_slice).collect();
        assert!(unpack(&codec, &conn, &short).is_err());
        let mut cut = bodies[2].clone();
        cut.pop();
        assert!(unpack(&codec, &conn, &[refs[0], refs[1], &cut]).is_err());
    }

    /// `compact`'s check of a block its worker decompressed: the bodies must
    /// be that block's, in order, holding exactly that payload.
    #[test]
    fn assembles_holds_only_for_the_block_as_cut() {
        let payload = zstd::bulk::compress(b"abcdef", 3).unwrap()[4..].to_vec();
        let prepared = Prepared::Encoded {
            dictionary: Some(4),
            compressed: true,
            blobs: Vec::new(),
            payload,
        };
        let lengths = [1, 2, 3];
        let bodies = member_bodies(&prepared, 300, &lengths, &[false; 3]).unwrap();
        let refs: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
        assert!(assembles(&refs, 300, &lengths, &prepared));
        // Another block id, other lengths, members missing or reordered.
        assert!(!assembles(&refs, 301, &lengths, &prepared));
        assert!(!assembles(&refs, 300, &[1, 2, 2], &prepared));
        assert!(!assembles(&refs[..2], 300, &lengths, &prepared));
        assert!(!assembles(
            &[refs[0], refs[2], refs[1]],
            300,
            &lengths,
            &prepared
        ));
        // A piece changed or cut short; another dictionary in the header.
        let mut changed = bodies[2].clone();
        *changed.last_mut().unwrap() ^= 1;
        assert!(!assembles(
            &[refs[0], refs[1], &changed],
            300,
            &lengths,
            &prepared
        ));
        let mut cut = bodies[2].clone();
        cut.pop();
        assert!(!assembles(
            &[refs[0], refs[1], &cut],
            300,
            &lengths,
            &prepared
        ));
        let Prepared::Encoded { payload, .. } = &prepared else {
            unreachable!()
        };
        let other = Prepared::Encoded {
            dictionary: Some(5),
            compressed: true,
            blobs: Vec::new(),
            payload: payload.clone(),
        };
        assert!(!assembles(&refs, 300, &lengths, &other));
    }

    #[test]
    fn a_header_claiming_more_than_a_block_is_refused_before_decoding() {
        let conn = Connection::open_in_memory().unwrap();
        let codec = Codec::default();
        let refused = |text: &[u8], lengths: &[usize]| {
            let prepared = Prepared::Encoded {
                dictionary: None,
                compressed: true,
                blobs: Vec::new(),
                payload: zstd::bulk::compress(text, 3).unwrap()[4..].to_vec(),
            };
            let n = lengths.len();
            let bodies = member_bodies(&prepared, 7, lengths, &vec![false; n]).unwrap();
            let refs: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
            unpack(&codec, &conn, &refs).unwrap_err().to_string()
        };
        // Three members claiming 2^63 - 1 bytes each: the sum overflows.
        let err = refused(b"abc", &[i64::MAX as usize; 3]);
        assert!(err.contains("more text than a block holds"), "{err}");
        let err = refused(b"abc", &[BLOCK_BYTES, 1]);
        assert!(err.contains("more text than a block holds"), "{err}");
        // A frame of 1 MB of zeros (a few hundred bytes stored) under a
        // header that says 3: refused from the frame's own size, unread.
        let err = refused(&vec![0; 1 << 20], &[1, 2]);
        assert!(err.contains("where 3 are expected"), "{err}");
    }
}
