//! A deterministic workload generator: pi-realistic session files for tests and
//! benchmarks.
//!
//! Everything is a pure function of a seed (a [`SplitMix64`] generator; no
//! `rand` dependency), so the same options always write the same bytes. Files
//! are pi version-3 JSONL, each entry written as the exact JSON text pi's
//! `JSON.stringify` would produce for it (key order, escapes, number
//! spelling), and laid out in pi's directory layout
//! (`<root>/--<encoded cwd>--/<createdAt>_<id>.jsonl`).
//!
//! # What a session holds
//! Turns of a coding agent: a `user` message, then assistant messages that call
//! tools (`bash`, `read`, `edit`, `write`, `grep`) each followed by its
//! `toolResult` (a few hundred bytes to a few KB), then a final assistant
//! answer. Assistant messages carry thinking, text and `toolCall` parts,
//! `provider`/`model` and a full `usage` with costs. Between turns: model and
//! thinking-level changes, labels, a session name, and a compaction about
//! every [`GenOptions::compaction_every`] entries (with a `firstKeptEntryId`
//! some 20–60 entries back on the active path). The average entry is about
//! 900 bytes, so 100,000 entries make about 90 MB.
//!
//! # Shapes
//! - [`Shape::Linear`]: one chat, every entry the child of the one before
//!   (entry `i` is at depth `i`).
//! - [`Shape::Forked`]: one long conversation with [`GenOptions::forks`] forks:
//!   *regenerations* (the leaf moves to an old assistant message's parent and
//!   a new reply is appended beside it) and *moves back* (the leaf moves to an
//!   old turn, sometimes with a `branch_summary`, and the conversation goes on
//!   from there). Half the fork targets are recent, half anywhere in the past.
//! - [`Shape::Archive`]: many sessions (sizes skewed: many small, a few large)
//!   across a dozen working directories, created over half a year.
//!
//! Adversarial shapes, for the branch cache and path walks:
//! - [`Shape::Regenerate`]: the user regenerates the latest assistant reply
//!   again and again (about every [`GenOptions::fork_every`] entries, default
//!   4) and goes on from the new one: every fork point lies on the active path.
//! - [`Shape::Caterpillar`]: a long spine with a one-entry dead-end side branch
//!   at every spine entry (every [`GenOptions::fork_every`]-th, default 1); the
//!   leaf moves back to the spine entry after each side branch.
//! - [`Shape::Broom`]: a short handle, then [`GenOptions::forks`] sibling
//!   replies (*bristles*, 1–3 entries each) under one user message (best-of-n
//!   sampling), then the conversation goes on from the last bristle.
//! - [`Shape::DanglingRoot`]: like [`Shape::Forked`], but the first entry's
//!   `parentId` names an entry that is not in the file (a file cut from a
//!   longer one): pi opens it; a walk to the root fails with `invalid_session`.
//!
//! # Entry ids
//! Entry `i` of a session has the id [`SessionIds::id`]`(i)`: eight hex digits
//! from a bijection of `i`, so ids never collide and a benchmark can name a
//! random existing entry without reading the file.

use sessiontree::layout::{encode_cwd, session_file_name};
use sessiontree::{Error, Result};
use std::fmt::Write as _;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Version of the generator's output; bumped whenever the same options would
/// produce different bytes (benchmarks key their cached data sets on it).
pub const GENERATOR_VERSION: u32 = 2;

/// Words that occur in generated text at a moderate rate, for search benchmarks.
pub const SEARCH_TERMS: &[&str] = &["checkpoint", "migration", "tokenizer"];

/// The SplitMix64 pseudo-random generator: tiny, fast and good enough for
/// workloads (not for cryptography).
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform integer in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        // Lemire's multiply-shift; the tiny bias is irrelevant for workloads.
        ((u128::from(self.next_u64()) * u128::from(n.max(1))) >> 64) as u64
    }

    /// A uniform `usize` in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        if hi <= lo {
            return lo;
        }
        lo + self.below((hi - lo + 1) as u64) as usize
    }

    /// A uniform float in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `true` with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// One element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// An independent generator derived from this one's seed and `stream`.
    pub fn fork(&self, stream: u64) -> SplitMix64 {
        let mut g = SplitMix64(self.0 ^ stream.wrapping_mul(0xd6e8_feb8_6659_fd93));
        g.next_u64();
        g
    }
}

/// The entry ids of one session: entry `i` gets a distinct 8-hex-digit id.
#[derive(Debug, Clone, Copy)]
pub struct SessionIds {
    key: u32,
}

impl SessionIds {
    /// The ids of the session generated from `seed`.
    pub fn new(seed: u64) -> Self {
        SessionIds {
            key: (seed ^ (seed >> 32)) as u32 ^ 0x5bd1_e995,
        }
    }

    /// The id of entry `index` (a bijection of `u32`, so no two entries share one).
    pub fn id(&self, index: u32) -> String {
        let mut x = index ^ self.key;
        x = x.wrapping_mul(0x9e37_79b1);
        x ^= x >> 15;
        x = x.wrapping_mul(0x85eb_ca77);
        x ^= x >> 13;
        x = x.wrapping_add(self.key.rotate_left(7));
        format!("{x:08x}")
    }
}

/// The shape of a generated workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// One chat without forks.
    Linear,
    /// One long conversation with many forks.
    Forked,
    /// Many sessions in pi's directory layout.
    Archive,
    /// One chat whose latest reply is regenerated again and again (every fork on the active path).
    Regenerate,
    /// A long spine with a one-entry dead-end side branch at every spine entry.
    Caterpillar,
    /// Thousands of sibling replies under one user message (best-of-n sampling).
    Broom,
    /// Like `Forked`, but the first entry's parent is missing from the file.
    DanglingRoot,
}

impl Shape {
    /// Every shape, in declaration order.
    pub const ALL: [Shape; 7] = [
        Shape::Linear,
        Shape::Forked,
        Shape::Archive,
        Shape::Regenerate,
        Shape::Caterpillar,
        Shape::Broom,
        Shape::DanglingRoot,
    ];

    /// The shape's name as the CLI spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Shape::Linear => "linear",
            Shape::Forked => "forked",
            Shape::Archive => "archive",
            Shape::Regenerate => "regenerate",
            Shape::Caterpillar => "caterpillar",
            Shape::Broom => "broom",
            Shape::DanglingRoot => "dangling-root",
        }
    }

    /// The stream each shape draws from, so two shapes generated with the
    /// same seed never share session or entry ids.
    fn salt(self) -> u64 {
        match self {
            Shape::Linear => 0x6c69_6e65_6172,
            Shape::Forked => 0x666f_726b_6564,
            Shape::Archive => 0x6172_6368_6976,
            Shape::Regenerate => 0x7265_6765_6e72,
            Shape::Caterpillar => 0x6361_7465_7270,
            Shape::Broom => 0x6272_6f6f_6d73,
            Shape::DanglingRoot => 0x6461_6e67_6c65,
        }
    }
}

/// The tree shape of one generated session (what a [`Shape`] makes of each
/// of its sessions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeShape {
    /// [`SessionSpec::forks`] forks spread over the session (regenerations,
    /// moves back, detours); with none, a chain.
    Spread,
    /// The latest assistant reply on the active path is regenerated about
    /// every `every` entries (at least 2; below about 5 the chat's own turns
    /// set the pace) and the chat goes on from the new one.
    Regenerate {
        /// About how many entries between regenerations.
        every: usize,
    },
    /// Every `every`-th entry that becomes the leaf gets a one-entry dead-end
    /// side child, then the leaf moves back to it.
    Caterpillar {
        /// Spine entries per side branch (1: every spine entry).
        every: usize,
    },
    /// A short handle, then [`SessionSpec::forks`] sibling replies (bristles)
    /// under one user message, then the chat goes on from the last one.
    Broom,
}

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenOptions {
    /// The shape.
    pub shape: Shape,
    /// Entries in all (for an archive: summed over its sessions).
    pub entries: usize,
    /// Forks (forked and dangling-root shapes; for an archive, summed over
    /// its sessions; for a broom, its bristles). `None` means one per 100
    /// entries for `forked` and `dangling-root`, one per 150 for `archive`,
    /// and for `broom` entries/2 (at most 10,000), cut to what fits.
    pub forks: Option<usize>,
    /// About how many entries between forks: between regenerations for
    /// `regenerate` (`None`: 4; at least 2, though below about 5 the chat's
    /// own turns set the pace), spine entries per side branch for
    /// `caterpillar` (`None`: 1). Other shapes ignore it.
    pub fork_every: Option<usize>,
    /// Sessions of an archive; `None` means one per 100 entries (1–10,000).
    pub sessions: Option<usize>,
    /// About how many entries between compactions (0: none).
    pub compaction_every: usize,
    /// The seed.
    pub seed: u64,
    /// Working directory of a single-session shape (default `/home/dev/projects/sessiontree`).
    pub cwd: Option<String>,
}

impl Default for GenOptions {
    fn default() -> Self {
        GenOptions {
            shape: Shape::Linear,
            entries: 1000,
            forks: None,
            fork_every: None,
            sessions: None,
            compaction_every: 500,
            seed: 1,
            cwd: None,
        }
    }
}

/// What was written for one session.
#[derive(Debug, Clone, PartialEq)]
pub struct GeneratedSession {
    /// The file.
    pub path: PathBuf,
    /// Session id.
    pub id: String,
    /// Working directory.
    pub cwd: String,
    /// Creation time (header `timestamp`).
    pub created_at: String,
    /// The seed its entries came from ([`SessionIds::new`] of it names them).
    pub seed: u64,
    /// Entries written (the header not counted).
    pub entries: usize,
    /// Bytes written (the header included).
    pub bytes: u64,
    /// Forks made: regenerations plus moves back; for a caterpillar its side
    /// branches; for a broom its bristles (the children of its hub).
    pub forks: usize,
    /// Compaction entries.
    pub compactions: usize,
    /// The leaf after the last entry.
    pub leaf_id: Option<String>,
    /// Depth of the leaf (a root has depth 0).
    pub leaf_depth: usize,
    /// Greatest depth of any entry.
    pub max_depth: usize,
}

/// What [`generate`] wrote.
#[derive(Debug, Clone)]
pub struct GenReport {
    /// The options it ran with.
    pub shape: Shape,
    /// The seed.
    pub seed: u64,
    /// Every session written, in creation order.
    pub sessions: Vec<GeneratedSession>,
}

impl GenReport {
    /// Entries over all sessions.
    pub fn total_entries(&self) -> usize {
        self.sessions.iter().map(|s| s.entries).sum()
    }

    /// Bytes over all sessions.
    pub fn total_bytes(&self) -> u64 {
        self.sessions.iter().map(|s| s.bytes).sum()
    }
}

/// How to generate one session (the building block of every shape).
#[derive(Debug, Clone)]
pub struct SessionSpec {
    /// Session id.
    pub id: String,
    /// Creation time, Unix milliseconds.
    pub created_ms: i64,
    /// Working directory.
    pub cwd: String,
    /// Entries to write.
    pub entries: usize,
    /// Forks to make ([`TreeShape::Spread`]) or bristles ([`TreeShape::Broom`]).
    pub forks: usize,
    /// About how many entries between compactions (0: none).
    pub compaction_every: usize,
    /// Seed of the entries.
    pub seed: u64,
    /// The shape of the session's tree.
    pub tree: TreeShape,
    /// Whether the first entry's `parentId` names an entry that is not in the
    /// file (as in a file cut from a longer one) instead of being `null`.
    pub dangling_root: bool,
}

const BASE_MS: i64 = 1_748_736_000_000; // 2025-06-01T00:00:00.000Z

impl GenOptions {
    /// The sessions [`generate`] writes for these options, in creation order
    /// (one for every shape but [`Shape::Archive`]); [`write_session`] writes
    /// each.
    pub fn session_specs(&self) -> Vec<SessionSpec> {
        // Each shape draws from its own stream, so two shapes generated with
        // the same seed never share session ids (they can be imported side by
        // side).
        let mut rng = SplitMix64::new(self.seed).fork(self.shape.salt());
        let (tree, forks) = match self.shape {
            Shape::Archive => return archive_specs(self, &mut rng),
            Shape::Linear => (TreeShape::Spread, 0),
            Shape::Forked | Shape::DanglingRoot => {
                (TreeShape::Spread, self.forks.unwrap_or(self.entries / 100))
            }
            Shape::Regenerate => (
                TreeShape::Regenerate {
                    every: self.fork_every.unwrap_or(4).max(2),
                },
                0,
            ),
            Shape::Caterpillar => (
                TreeShape::Caterpillar {
                    every: self.fork_every.unwrap_or(1).max(1),
                },
                0,
            ),
            Shape::Broom => (
                TreeShape::Broom,
                self.forks.unwrap_or((self.entries / 2).min(10_000)),
            ),
        };
        let cwd = self
            .cwd
            .clone()
            .unwrap_or_else(|| "/home/dev/projects/sessiontree".to_owned());
        let created_ms = BASE_MS + rng.below(86_400_000) as i64;
        vec![SessionSpec {
            id: uuid_v7(created_ms, &mut rng),
            created_ms,
            cwd,
            entries: self.entries,
            forks,
            compaction_every: self.compaction_every,
            seed: rng.next_u64(),
            tree,
            dangling_root: self.shape == Shape::DanglingRoot,
        }]
    }
}

/// Generates a workload under `out` (created if needed) in pi's layout.
pub fn generate(out: &Path, options: &GenOptions) -> Result<GenReport> {
    let specs = options.session_specs();
    let mut sessions = Vec::with_capacity(specs.len());
    for spec in &specs {
        let dir = out.join(encode_cwd(&spec.cwd));
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let created_at = iso_millis(spec.created_ms);
        let path = dir.join(session_file_name(&created_at, &spec.id));
        let file = std::fs::File::create(&path)
            .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
        let mut w = BufWriter::with_capacity(1 << 16, file);
        let mut s = write_session(&mut w, spec)
            .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
        w.flush()
            .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
        s.path = path;
        sessions.push(s);
    }
    Ok(GenReport {
        shape: options.shape,
        seed: options.seed,
        sessions,
    })
}

fn archive_specs(options: &GenOptions, rng: &mut SplitMix64) -> Vec<SessionSpec> {
    let total = options.entries.max(1);
    let count = options
        .sessions
        .unwrap_or((total / 100).clamp(1, 10_000))
        .clamp(1, total);
    let projects = [
        "sessiontree",
        "webapp",
        "infra",
        "pi-mono",
        "dotfiles",
        "ml-pipeline",
        "docs-site",
        "compiler",
        "billing-service",
        "mobile-app",
        "data-etl",
        "scratch",
    ];
    let cwds: Vec<String> = projects
        .iter()
        .map(|p| format!("/home/dev/projects/{p}"))
        .collect();
    // Skewed sizes: weights exp(2·u²) spread from 1 to e², then a few outliers.
    let mut weights: Vec<f64> = (0..count)
        .map(|_| {
            let u = rng.unit();
            let w = (3.0 * u * u).exp();
            if rng.chance(0.02) {
                w * 8.0
            } else {
                w
            }
        })
        .collect();
    let sum: f64 = weights.iter().sum();
    for w in &mut weights {
        *w /= sum;
    }
    let min_each = (total / count).min(4);
    let spare = total - min_each * count;
    let mut sizes: Vec<usize> = weights
        .iter()
        .map(|w| min_each + (w * spare as f64).floor() as usize)
        .collect();
    let mut assigned: usize = sizes.iter().sum();
    let mut i = 0;
    while assigned < total {
        sizes[i % count] += 1;
        assigned += 1;
        i += 1;
    }
    let total_forks = options.forks.unwrap_or(total / 150);
    let half_year = 183 * 86_400_000i64;
    let mut starts: Vec<i64> = (0..count)
        .map(|_| BASE_MS - half_year + rng.below(half_year as u64) as i64)
        .collect();
    starts.sort_unstable();
    starts
        .into_iter()
        .zip(sizes)
        .map(|(created_ms, entries)| SessionSpec {
            id: uuid_v7(created_ms, rng),
            created_ms,
            cwd: rng.pick(&cwds).clone(),
            entries,
            forks: (total_forks as f64 * entries as f64 / total as f64).round() as usize,
            compaction_every: options.compaction_every,
            seed: rng.next_u64(),
            tree: TreeShape::Spread,
            dangling_root: false,
        })
        .collect()
}

/// Appends `len` base64 characters of random bytes (a multiple of 4).
fn push_base64_noise(out: &mut String, rng: &mut SplitMix64, len: usize) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let len = len / 4 * 4;
    out.reserve(len);
    let mut left = len;
    while left > 0 {
        let mut r = rng.next_u64();
        // Ten 6-bit digits per draw.
        for _ in 0..10.min(left) {
            out.push(ALPHABET[(r & 63) as usize] as char);
            r >>= 6;
        }
        left = left.saturating_sub(10);
    }
}

/// A UUIDv7 text for a creation time, its random bits from `rng`.
pub fn uuid_v7(ms: i64, rng: &mut SplitMix64) -> String {
    let ms = ms as u64 & 0xffff_ffff_ffff;
    let r = rng.next_u64();
    let r2 = rng.next_u64();
    format!(
        "{:08x}-{:04x}-7{:03x}-{:04x}-{:012x}",
        ms >> 16,
        ms & 0xffff,
        r & 0xfff,
        0x8000 | ((r >> 12) & 0x3fff),
        r2 & 0xffff_ffff_ffff
    )
}

/// Unix milliseconds as JavaScript's `toISOString` writes them.
pub fn iso_millis(ms: i64) -> String {
    sessiontree::entry::iso_timestamp(ms)
}

/// Appends `s` as a JSON string literal, escaped as `JSON.stringify` does.
fn push_json_str(out: &mut String, s: &str) {
    sessiontree::json::push_string_literal(out, s);
}

/// A number as JavaScript prints it.
fn push_js_number(out: &mut String, x: f64) {
    out.push_str(&sessiontree::json::js_number_text(x));
}

// ---------------------------------------------------------------------------
// Text

const WORDS: &[&str] = &[
    "the",
    "to",
    "and",
    "a",
    "of",
    "in",
    "is",
    "it",
    "that",
    "for",
    "this",
    "we",
    "with",
    "on",
    "file",
    "function",
    "test",
    "error",
    "be",
    "not",
    "as",
    "can",
    "should",
    "now",
    "code",
    "if",
    "are",
    "from",
    "by",
    "add",
    "use",
    "return",
    "value",
    "type",
    "fix",
    "check",
    "then",
    "run",
    "call",
    "let",
    "new",
    "build",
    "update",
    "module",
    "change",
    "config",
    "path",
    "line",
    "struct",
    "field",
    "query",
    "index",
    "string",
    "result",
    "option",
    "session",
    "entry",
    "branch",
    "leaf",
    "parent",
    "cache",
    "read",
    "write",
    "append",
    "import",
    "export",
    "failing",
    "passes",
    "compile",
    "warning",
    "trait",
    "impl",
    "crate",
    "version",
    "schema",
    "table",
    "column",
    "database",
    "transaction",
    "commit",
    "rollback",
    "lock",
    "thread",
    "async",
    "await",
    "request",
    "response",
    "server",
    "client",
    "handler",
    "router",
    "endpoint",
    "token",
    "user",
    "message",
    "assistant",
    "tool",
    "model",
    "context",
    "summary",
    "compaction",
    "label",
    "name",
    "parse",
    "serialize",
    "format",
    "output",
    "input",
    "buffer",
    "stream",
    "reader",
    "writer",
    "iterator",
    "closure",
    "lifetime",
    "borrow",
    "ownership",
    "clone",
    "reference",
    "pointer",
    "memory",
    "allocation",
    "performance",
    "benchmark",
    "latency",
    "throughput",
    "median",
    "profile",
    "flamegraph",
    "hot",
    "loop",
    "allocations",
    "vector",
    "hashmap",
    "btree",
    "sorted",
    "unique",
    "duplicate",
    "missing",
    "invalid",
    "valid",
    "expected",
    "actual",
    "assert",
    "panic",
    "unwrap",
    "handle",
    "propagate",
    "retry",
    "timeout",
    "deadline",
    "backoff",
    "checkpoint",
    "migration",
    "tokenizer",
    "snapshot",
    "replay",
    "journal",
    "durable",
    "fsync",
    "crash",
    "recovery",
    "torn",
    "tail",
    "prefix",
    "suffix",
    "offset",
    "length",
    "width",
    "height",
    "layout",
    "render",
    "component",
    "props",
    "state",
    "effect",
    "hook",
    "store",
    "dispatch",
    "action",
    "reducer",
    "selector",
    "deploy",
    "cluster",
    "container",
    "image",
    "volume",
    "secret",
    "variable",
    "environment",
    "pipeline",
    "stage",
    "job",
    "artifact",
    "cargo",
    "npm",
    "docker",
    "kubectl",
    "terraform",
    "plan",
    "apply",
    "refactor",
    "rename",
    "extract",
    "inline",
    "split",
    "merge",
    "rebase",
    "conflict",
    "diff",
    "patch",
    "hunk",
    "because",
    "however",
    "instead",
    "actually",
    "probably",
    "maybe",
    "looks",
    "like",
    "seems",
    "good",
    "great",
    "right",
    "wrong",
    "better",
    "simpler",
    "faster",
    "slower",
    "again",
    "first",
    "last",
    "next",
    "before",
    "after",
    "all",
    "some",
    "each",
    "every",
    "only",
    "also",
    "still",
];

const FILES: &[&str] = &[
    "src/lib.rs",
    "src/main.rs",
    "src/backend/sqlite/mod.rs",
    "src/backend/jsonl.rs",
    "src/session.rs",
    "src/entry.rs",
    "src/cli/mod.rs",
    "tests/contract.rs",
    "Cargo.toml",
    "README.md",
    "package.json",
    "src/components/App.tsx",
    "src/api/routes.ts",
    "infra/main.tf",
    "scripts/deploy.sh",
    "docs/architecture.md",
];

const MODELS: &[(&str, &str, &str, f64, f64)] = &[
    // provider, api, model, $/Mtok in, $/Mtok out
    (
        "anthropic",
        "anthropic-messages",
        "claude-sonnet-4-5",
        3.0,
        15.0,
    ),
    (
        "anthropic",
        "anthropic-messages",
        "claude-opus-4-1",
        15.0,
        75.0,
    ),
    ("openai", "openai-responses", "gpt-5", 1.25, 10.0),
    (
        "google",
        "google-generative-ai",
        "gemini-2.5-pro",
        1.25,
        10.0,
    ),
];

const THINKING: &[&str] = &["off", "minimal", "low", "medium", "high"];
const TOOLS: &[&str] = &["bash", "read", "edit", "write", "grep"];

fn word(rng: &mut SplitMix64) -> &'static str {
    // Skewed towards the front of the list (a rough Zipf).
    let u = rng.unit();
    WORDS[((u * u * u) * WORDS.len() as f64) as usize % WORDS.len()]
}

fn sentence(rng: &mut SplitMix64, out: &mut String) {
    let n = rng.range(6, 18);
    for i in 0..n {
        let w = word(rng);
        if i == 0 {
            let mut cs = w.chars();
            if let Some(f) = cs.next() {
                out.extend(f.to_uppercase());
                out.push_str(cs.as_str());
            }
        } else {
            out.push(' ');
            if rng.chance(0.04) {
                out.push('`');
                let file = FILES[rng.below(FILES.len() as u64) as usize];
                out.push_str(file);
                out.push('`');
            } else {
                out.push_str(w);
            }
        }
    }
    out.push_str(if rng.chance(0.15) { "?" } else { "." });
}

/// Prose of about `target` bytes.
fn prose(rng: &mut SplitMix64, target: usize) -> String {
    let mut s = String::with_capacity(target + 64);
    while s.len() < target {
        if !s.is_empty() {
            s.push_str(if rng.chance(0.2) { "\n\n" } else { " " });
        }
        sentence(rng, &mut s);
    }
    s
}

/// Tool output of about `target` bytes: listings, compiler output, code.
fn tool_output(rng: &mut SplitMix64, target: usize) -> String {
    let mut s = String::with_capacity(target + 96);
    let style = rng.below(3);
    let mut n = 1;
    while s.len() < target {
        match style {
            0 => {
                let _ = writeln!(
                    s,
                    "{}:{}:{}: {} `{}` {}",
                    rng.pick(FILES),
                    rng.range(1, 900),
                    rng.range(1, 80),
                    if rng.chance(0.3) { "error" } else { "warning" },
                    word(rng),
                    word(rng)
                );
            }
            1 => {
                let _ = writeln!(
                    s,
                    "{n:>4}\t    let {} = {}(&{}, \"{}\")?;",
                    word(rng),
                    word(rng),
                    word(rng),
                    word(rng)
                );
            }
            _ => {
                let _ = writeln!(
                    s,
                    "test {}::{}_{} ... {}",
                    word(rng),
                    word(rng),
                    word(rng),
                    if rng.chance(0.9) { "ok" } else { "FAILED" }
                );
            }
        }
        n += 1;
    }
    s
}

fn tool_call_id(rng: &mut SplitMix64) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut s = String::from("toolu_");
    for _ in 0..24 {
        s.push(ALPHABET[rng.below(ALPHABET.len() as u64) as usize] as char);
    }
    s
}

fn signature(rng: &mut SplitMix64, len: usize) -> String {
    const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(len + 2);
    for _ in 0..len {
        s.push(B64[rng.below(64) as usize] as char);
    }
    s.push_str("==");
    s
}

// ---------------------------------------------------------------------------
// Sessions

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    User,
    AssistantTool,
    ToolResult,
    AssistantFinal,
    Compaction,
    Other,
}

const NONE: u32 = u32::MAX;

/// One session being generated: the tree so far and the writer.
struct Builder<'w, W: Write> {
    out: &'w mut W,
    rng: SplitMix64,
    ids: SessionIds,
    target: usize,
    parent: Vec<u32>,
    depth: Vec<u32>,
    kind: Vec<Kind>,
    leaf: u32,
    now_ms: i64,
    line: String,
    bytes: u64,
    model: usize,
    compactions: usize,
    forks: usize,
    since_compaction: usize,
    next_compaction: usize,
    compaction_every: usize,
    /// A far fork in progress: the tip to return to, and when.
    detour: Option<(u32, usize)>,
    /// The `parentId` the first root gets instead of `null` (a dangling root).
    root_parent: Option<String>,
    /// Caterpillar: a side branch at every this many spine entries (0: none).
    side_every: usize,
    /// Caterpillar: spine entries so far.
    spine: usize,
    /// Caterpillar: a side branch is being written.
    in_side: bool,
    /// Turns so far.
    turns: usize,
    /// Whether the session has been named.
    named: bool,
    /// Inline images in tool results: the chance a tool result carries one,
    /// and its base64 length (0: none).
    images: (f64, usize),
}

impl<'w, W: Write> Builder<'w, W> {
    /// A builder of `target` entries whose clock starts at `now_ms`, without
    /// compactions, side branches or a dangling root.
    fn new(out: &'w mut W, rng: SplitMix64, ids: SessionIds, target: usize, now_ms: i64) -> Self {
        let capacity = target.min(1 << 20);
        Builder {
            out,
            rng,
            ids,
            target,
            parent: Vec::with_capacity(capacity),
            depth: Vec::with_capacity(capacity),
            kind: Vec::with_capacity(capacity),
            leaf: NONE,
            now_ms,
            line: String::with_capacity(8192),
            bytes: 0,
            model: 0,
            compactions: 0,
            forks: 0,
            since_compaction: 0,
            next_compaction: usize::MAX,
            compaction_every: 1,
            detour: None,
            root_parent: None,
            side_every: 0,
            spine: 0,
            in_side: false,
            turns: 0,
            named: false,
            images: (0.0, 0),
        }
    }

    fn full(&self) -> bool {
        self.parent.len() >= self.target
    }

    fn id(&self, i: u32) -> String {
        self.ids.id(i)
    }

    /// Starts an entry line: `{"type":..,"id":..,"parentId":..,"timestamp":..`.
    fn begin(&mut self, ty: &str, parent: u32, advance_ms: i64) -> u32 {
        let index = self.parent.len() as u32;
        self.now_ms += advance_ms.max(1);
        self.line.clear();
        self.line.push_str("{\"type\":\"");
        self.line.push_str(ty);
        self.line.push_str("\",\"id\":\"");
        let id = self.id(index);
        self.line.push_str(&id);
        self.line.push_str("\",\"parentId\":");
        if parent == NONE {
            match self.root_parent.take() {
                Some(p) => push_json_str(&mut self.line, &p),
                None => self.line.push_str("null"),
            }
        } else {
            let p = self.id(parent);
            push_json_str(&mut self.line, &p);
        }
        self.line.push_str(",\"timestamp\":\"");
        let now = self.now_ms;
        self.line.push_str(&iso_millis(now));
        self.line.push('"');
        index
    }

    /// Ends the line started by [`Builder::begin`], records the entry and
    /// writes it. `leaf_after` is the leaf the entry leaves (itself, or a
    /// `leaf` entry's target). In a caterpillar, an entry that becomes the
    /// leaf may get its side branch ([`Builder::side_branch`]).
    fn finish(&mut self, parent: u32, kind: Kind, leaf_after: u32) -> std::io::Result<u32> {
        self.line.push_str("}\n");
        let index = self.parent.len() as u32;
        self.parent.push(parent);
        self.depth.push(if parent == NONE {
            0
        } else {
            self.depth[parent as usize] + 1
        });
        self.kind.push(kind);
        self.leaf = leaf_after;
        self.since_compaction += 1;
        self.bytes += self.line.len() as u64;
        self.out.write_all(self.line.as_bytes())?;
        if self.side_every > 0 && !self.in_side && leaf_after == index {
            self.spine += 1;
            if self.spine.is_multiple_of(self.side_every) {
                self.side_branch(index, kind)?;
            }
        }
        Ok(index)
    }

    /// A caterpillar's side branch of spine entry `t`: one dead-end child (a
    /// reply the user abandoned beside a user message, else a message the user
    /// took back), then the leaf moves back to `t`.
    fn side_branch(&mut self, t: u32, kind: Kind) -> std::io::Result<()> {
        if self.full() {
            return Ok(());
        }
        self.in_side = true;
        let side = if kind == Kind::User {
            self.assistant(None).map(|_| ())
        } else {
            self.user().map(|_| ())
        };
        let moved = match side {
            Ok(()) if !self.full() => self.move_leaf(t).map(|_| self.forks += 1),
            other => other,
        };
        self.in_side = false;
        moved
    }

    fn usage(&mut self, input: u64, output: u64) {
        let (_, _, _, pin, pout) = MODELS[self.model];
        let cache_read = if self.rng.chance(0.8) {
            self.rng.range(2000, 120_000) as u64
        } else {
            0
        };
        let cache_write = if self.rng.chance(0.5) {
            self.rng.range(100, 8000) as u64
        } else {
            0
        };
        let c_in = input as f64 * pin / 1e6;
        let c_out = output as f64 * pout / 1e6;
        let c_cr = cache_read as f64 * pin * 0.1 / 1e6;
        let c_cw = cache_write as f64 * pin * 1.25 / 1e6;
        let l = &mut self.line;
        let _ = write!(
            l,
            "\"usage\":{{\"input\":{input},\"output\":{output},\"cacheRead\":{cache_read},\"cacheWrite\":{cache_write},\"totalTokens\":{},\"cost\":{{\"input\":",
            input + output + cache_read + cache_write
        );
        push_js_number(l, c_in);
        l.push_str(",\"output\":");
        push_js_number(l, c_out);
        l.push_str(",\"cacheRead\":");
        push_js_number(l, c_cr);
        l.push_str(",\"cacheWrite\":");
        push_js_number(l, c_cw);
        l.push_str(",\"total\":");
        push_js_number(l, c_in + c_out + c_cr + c_cw);
        l.push_str("}}");
    }

    fn user(&mut self) -> std::io::Result<u32> {
        let parent = self.leaf;
        let advance = self.rng.range(15_000, 600_000) as i64;
        self.begin("message", parent, advance);
        let len = if self.rng.chance(0.08) {
            self.rng.range(500, 1500)
        } else {
            self.rng.range(30, 350)
        };
        let text = prose(&mut self.rng, len);
        self.line
            .push_str(",\"message\":{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":");
        push_json_str(&mut self.line, &text);
        let _ = write!(self.line, "}}],\"timestamp\":{}}}", self.now_ms - 3);
        self.finish(parent, Kind::User, self.parent.len() as u32)
    }

    /// An assistant message; with a tool call when `tool` is given. Returns
    /// the entry and the call's id.
    fn assistant(&mut self, tool: Option<&str>) -> std::io::Result<(u32, String)> {
        let parent = self.leaf;
        let advance = self.rng.range(2_000, 45_000) as i64;
        self.begin("message", parent, advance);
        let (provider, api, model, _, _) = MODELS[self.model];
        self.line
            .push_str(",\"message\":{\"role\":\"assistant\",\"content\":[");
        let thinks = provider != "openai" && self.rng.chance(0.6);
        if thinks {
            let len = self.rng.range(60, 300);
            let t = prose(&mut self.rng, len);
            self.line.push_str("{\"type\":\"thinking\",\"thinking\":");
            push_json_str(&mut self.line, &t);
            if provider == "anthropic" {
                let n = self.rng.range(60, 200);
                let sig = signature(&mut self.rng, n);
                self.line.push_str(",\"thinkingSignature\":");
                push_json_str(&mut self.line, &sig);
            }
            self.line.push_str("},");
        }
        let text_len = if tool.is_some() {
            self.rng.range(20, 160)
        } else {
            self.rng.range(100, 700)
        };
        let text = prose(&mut self.rng, text_len);
        self.line.push_str("{\"type\":\"text\",\"text\":");
        push_json_str(&mut self.line, &text);
        self.line.push('}');
        let mut call_id = String::new();
        if let Some(name) = tool {
            call_id = tool_call_id(&mut self.rng);
            self.line.push_str(",{\"type\":\"toolCall\",\"id\":");
            push_json_str(&mut self.line, &call_id);
            self.line.push_str(",\"name\":");
            push_json_str(&mut self.line, name);
            self.line.push_str(",\"arguments\":{");
            let file = *self.rng.pick(FILES);
            match name {
                "bash" => {
                    let cmd = match self.rng.below(4) {
                        0 => format!("cargo test {} 2>&1 | tail -40", word(&mut self.rng)),
                        1 => format!("rg -n \"{}\" src/", word(&mut self.rng)),
                        2 => "git status --short && git diff --stat".to_owned(),
                        _ => format!("ls -la {}", file.rsplit_once('/').map_or(".", |p| p.0)),
                    };
                    self.line.push_str("\"command\":");
                    push_json_str(&mut self.line, &cmd);
                }
                "edit" => {
                    let old = tool_output(&mut self.rng, 60);
                    let new = tool_output(&mut self.rng, 80);
                    self.line.push_str("\"path\":");
                    push_json_str(&mut self.line, file);
                    self.line.push_str(",\"oldText\":");
                    push_json_str(&mut self.line, &old);
                    self.line.push_str(",\"newText\":");
                    push_json_str(&mut self.line, &new);
                }
                "write" => {
                    let n = self.rng.range(100, 500);
                    let body = tool_output(&mut self.rng, n);
                    self.line.push_str("\"path\":");
                    push_json_str(&mut self.line, file);
                    self.line.push_str(",\"content\":");
                    push_json_str(&mut self.line, &body);
                }
                "grep" => {
                    let w = word(&mut self.rng);
                    self.line.push_str("\"pattern\":");
                    push_json_str(&mut self.line, w);
                    self.line.push_str(",\"path\":\"src\"");
                }
                _ => {
                    self.line.push_str("\"path\":");
                    push_json_str(&mut self.line, file);
                }
            }
            self.line.push_str("}}");
        }
        let _ = write!(
            self.line,
            "],\"api\":\"{api}\",\"provider\":\"{provider}\",\"model\":\"{model}\","
        );
        let input = self.rng.range(20, 4000) as u64;
        let output = (text_len / 3 + self.rng.range(10, 400)) as u64;
        self.usage(input, output);
        let _ = write!(
            self.line,
            ",\"stopReason\":\"{}\",\"timestamp\":{}}}",
            if tool.is_some() { "toolUse" } else { "stop" },
            self.now_ms - 1
        );
        let kind = if tool.is_some() {
            Kind::AssistantTool
        } else {
            Kind::AssistantFinal
        };
        let i = self.finish(parent, kind, self.parent.len() as u32)?;
        Ok((i, call_id))
    }

    fn tool_result(&mut self, name: &str, call_id: &str) -> std::io::Result<u32> {
        let parent = self.leaf;
        let advance = self.rng.range(50, 8_000) as i64;
        self.begin("message", parent, advance);
        let len = if self.rng.chance(0.12) {
            self.rng.range(1500, 4000)
        } else {
            self.rng.range(120, 800)
        };
        let out = tool_output(&mut self.rng, len);
        self.line
            .push_str(",\"message\":{\"role\":\"toolResult\",\"toolCallId\":");
        push_json_str(&mut self.line, call_id);
        self.line.push_str(",\"toolName\":");
        push_json_str(&mut self.line, name);
        self.line.push_str(",\"content\":[");
        let (chance, image_len) = self.images;
        if image_len > 0 && self.rng.chance(chance) {
            // A screenshot as pi stores it: inline base64, incompressible.
            self.line.push_str("{\"type\":\"image\",\"data\":\"");
            push_base64_noise(&mut self.line, &mut self.rng, image_len);
            self.line.push_str("\",\"mimeType\":\"image/png\"},");
        }
        self.line.push_str("{\"type\":\"text\",\"text\":");
        push_json_str(&mut self.line, &out);
        self.line.push_str("}]");
        if name == "edit" && self.rng.chance(0.7) {
            let diff = tool_output(&mut self.rng, 160);
            self.line.push_str(",\"details\":{\"diff\":");
            push_json_str(&mut self.line, &diff);
            self.line.push('}');
        }
        let is_error = self.rng.chance(0.06);
        let _ = write!(
            self.line,
            ",\"isError\":{is_error},\"timestamp\":{}}}",
            self.now_ms
        );
        self.finish(parent, Kind::ToolResult, self.parent.len() as u32)
    }

    fn simple(&mut self, ty: &str, body: &str) -> std::io::Result<u32> {
        let parent = self.leaf;
        let advance = self.rng.range(100, 5_000) as i64;
        self.begin(ty, parent, advance);
        self.line.push_str(body);
        self.finish(parent, Kind::Other, self.parent.len() as u32)
    }

    fn model_change(&mut self) -> std::io::Result<u32> {
        self.model = self.rng.below(MODELS.len() as u64) as usize;
        let (provider, _, model, _, _) = MODELS[self.model];
        let body = format!(",\"provider\":\"{provider}\",\"modelId\":\"{model}\"");
        self.simple("model_change", &body)
    }

    fn thinking_change(&mut self) -> std::io::Result<u32> {
        let level = *self.rng.pick(THINKING);
        let body = format!(",\"thinkingLevel\":\"{level}\"");
        self.simple("thinking_level_change", &body)
    }

    /// The entry `n` steps up the active path from the leaf (or the root).
    fn ancestor(&self, mut i: u32, n: usize) -> u32 {
        for _ in 0..n {
            let p = self.parent[i as usize];
            if p == NONE {
                break;
            }
            i = p;
        }
        i
    }

    fn compaction(&mut self) -> std::io::Result<u32> {
        let back = self.rng.range(20, 60);
        let kept = self.ancestor(self.leaf, back);
        let parent = self.leaf;
        self.begin("compaction", parent, 9_000);
        let n = self.rng.range(1200, 3000);
        let summary = format!(
            "## Goal\n{}\n\n## Progress\n{}\n\n## Next steps\n{}",
            prose(&mut self.rng, n / 4),
            prose(&mut self.rng, n / 2),
            prose(&mut self.rng, n / 4)
        );
        self.line.push_str(",\"summary\":");
        push_json_str(&mut self.line, &summary);
        let kept_id = self.id(kept);
        self.line.push_str(",\"firstKeptEntryId\":");
        push_json_str(&mut self.line, &kept_id);
        let tokens = self.rng.range(80_000, 190_000);
        let _ = write!(
            self.line,
            ",\"tokensBefore\":{tokens},\"details\":{{\"readFiles\":["
        );
        for k in 0..self.rng.range(1, 4) {
            if k > 0 {
                self.line.push(',');
            }
            let f = *self.rng.pick(FILES);
            push_json_str(&mut self.line, f);
        }
        self.line.push_str("],\"modifiedFiles\":[");
        let f = *self.rng.pick(FILES);
        push_json_str(&mut self.line, f);
        self.line.push_str("]}");
        self.compactions += 1;
        let i = self.finish(parent, Kind::Compaction, self.parent.len() as u32)?;
        self.since_compaction = 0;
        let every = self.compaction_every;
        self.next_compaction = self.rng.range(every * 9 / 10, every * 11 / 10).max(1);
        Ok(i)
    }

    /// A `leaf` entry moving the leaf to `target`.
    fn move_leaf(&mut self, target: u32) -> std::io::Result<u32> {
        let parent = self.leaf;
        let advance = self.rng.range(1_000, 60_000) as i64;
        self.begin("leaf", parent, advance);
        let t = self.id(target);
        self.line.push_str(",\"targetId\":");
        push_json_str(&mut self.line, &t);
        self.finish(parent, Kind::Other, target)
    }

    fn branch_summary(&mut self, target: u32) -> std::io::Result<u32> {
        self.begin("branch_summary", target, 4_000);
        let t = self.id(target);
        self.line.push_str(",\"fromId\":");
        push_json_str(&mut self.line, &t);
        let n = self.rng.range(200, 900);
        let summary = prose(&mut self.rng, n);
        self.line.push_str(",\"summary\":");
        push_json_str(&mut self.line, &summary);
        self.line.push_str(",\"details\":{\"readFiles\":[");
        let f = *self.rng.pick(FILES);
        push_json_str(&mut self.line, f);
        self.line.push_str("],\"modifiedFiles\":[]}");
        self.finish(target, Kind::Other, self.parent.len() as u32)
    }

    /// Picks a recent entry of one of `kinds` on the active path (2–40 steps up).
    fn pick_recent(&mut self, kinds: &[Kind]) -> Option<u32> {
        let steps = self.rng.range(2, 40);
        self.find_up(kinds, steps)
    }

    /// The first entry of one of `kinds` (not a root) among the `steps`
    /// entries from the leaf up the active path.
    fn find_up(&self, kinds: &[Kind], steps: usize) -> Option<u32> {
        self.find_up_until(kinds, steps, None)
    }

    /// [`Builder::find_up`] that gives up at an entry of kind `stop`.
    fn find_up_until(&self, kinds: &[Kind], steps: usize, stop: Option<Kind>) -> Option<u32> {
        let mut i = self.leaf;
        for _ in 0..steps {
            if i == NONE || stop == Some(self.kind[i as usize]) {
                break;
            }
            if kinds.contains(&self.kind[i as usize]) && self.parent[i as usize] != NONE {
                return Some(i);
            }
            i = self.parent[i as usize];
        }
        None
    }

    /// Picks an entry of one of `kinds` anywhere in the log so far.
    fn pick_any(&mut self, kinds: &[Kind]) -> Option<u32> {
        let len = self.parent.len() as u32;
        if len < 4 {
            return None;
        }
        for _ in 0..64 {
            let i = self.rng.below(u64::from(len)) as u32;
            if kinds.contains(&self.kind[i as usize]) && self.parent[i as usize] != NONE {
                return Some(i);
            }
        }
        None
    }

    /// One fork. Recent forks change the course for good: a regeneration
    /// (leaf to an assistant message's parent, then a new reply) or a move
    /// back a few turns. A far fork is a detour: the leaf moves to an old
    /// turn, the conversation goes on there for a while, then the leaf moves
    /// back to where it was ([`Builder::detour`]).
    fn fork(&mut self) -> std::io::Result<()> {
        let r = self.rng.unit();
        if r < 0.45 {
            if let Some(old) = self.pick_recent(&[Kind::AssistantTool, Kind::AssistantFinal]) {
                let p = self.parent[old as usize];
                self.move_leaf(p)?;
                self.forks += 1;
                if !self.full() {
                    self.turn_body()?;
                }
                return Ok(());
            }
        }
        let far = r >= 0.75;
        let turn_ends = [Kind::AssistantFinal, Kind::ToolResult];
        let old = if far {
            self.pick_any(&turn_ends)
        } else {
            self.pick_recent(&turn_ends)
                .or_else(|| self.pick_any(&turn_ends))
        }
        .or_else(|| {
            self.pick_any(&[
                Kind::User,
                Kind::AssistantTool,
                Kind::AssistantFinal,
                Kind::ToolResult,
            ])
        });
        if let Some(old) = old {
            let tip = self.leaf;
            self.move_leaf(old)?;
            self.forks += 1;
            if !self.full() && self.rng.chance(0.3) {
                self.branch_summary(old)?;
            }
            if far {
                let room = self.target.saturating_sub(self.parent.len()) / 4;
                let len = self.rng.range(5, 120).min(room.max(1));
                self.detour = Some((tip, self.parent.len() + len));
            }
        }
        Ok(())
    }

    /// Ends a detour whose time has come: the leaf moves back to the tip it
    /// left, with a branch summary of the detour a third of the time.
    fn end_detour(&mut self) -> std::io::Result<bool> {
        match self.detour {
            Some((tip, until)) if self.parent.len() >= until => {
                self.detour = None;
                self.move_leaf(tip)?;
                if !self.full() && self.rng.chance(0.3) {
                    self.branch_summary(tip)?;
                }
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// The assistant side of a turn: tool calls with results, then an answer.
    fn turn_body(&mut self) -> std::io::Result<()> {
        self.turn_body_within(usize::MAX)
    }

    /// A turn body of at most `limit` entries (≥ 1): tool calls beyond what
    /// fits are dropped.
    fn turn_body_within(&mut self, limit: usize) -> std::io::Result<()> {
        let calls = match self.rng.below(10) {
            0..=1 => 0,
            2..=4 => 1,
            5..=6 => 2,
            7..=8 => 3,
            _ => self.rng.range(4, 8),
        }
        .min(limit.saturating_sub(1) / 2);
        for _ in 0..calls {
            if self.full() {
                return Ok(());
            }
            let name = *self.rng.pick(TOOLS);
            let (_, call_id) = self.assistant(Some(name))?;
            if self.full() {
                return Ok(());
            }
            self.tool_result(name, &call_id)?;
        }
        if !self.full() {
            self.assistant(None)?;
        }
        Ok(())
    }

    fn turn(&mut self) -> std::io::Result<()> {
        self.user()?;
        if !self.full() {
            self.turn_body()?;
        }
        Ok(())
    }

    /// What comes before anything else: the session's first entries (model
    /// and thinking level), or a compaction when one is due. Returns whether
    /// it wrote anything.
    fn housekeeping(&mut self) -> std::io::Result<bool> {
        if self.parent.is_empty() {
            self.model_change()?;
            if !self.full() {
                self.thinking_change()?;
            }
            return Ok(true);
        }
        if self.since_compaction >= self.next_compaction {
            self.compaction()?;
            return Ok(true);
        }
        Ok(false)
    }

    /// One step of the conversation: the session's name after the first
    /// turn, a model, thinking-level or tool change, a label, or a turn.
    fn chat(&mut self) -> std::io::Result<()> {
        if self.turns == 1 && !self.named {
            self.named = true;
            let len = self.rng.range(3, 7);
            let mut name = String::new();
            for k in 0..len {
                if k > 0 {
                    name.push(' ');
                }
                name.push_str(word(&mut self.rng));
            }
            let mut body = String::from(",\"name\":");
            push_json_str(&mut body, &name);
            self.simple("session_info", &body)?;
            return Ok(());
        }
        match self.rng.below(1000) {
            0..=24 => {
                self.model_change()?;
            }
            25..=54 => {
                self.thinking_change()?;
            }
            55..=64 => {
                let body = "\"activeToolNames\":[\"read\",\"bash\",\"edit\",\"write\",\"grep\"]";
                let body = format!(",{body}");
                self.simple("active_tools_change", &body)?;
            }
            65..=104 => {
                // Label a recent user message on the active path.
                if let Some(t) = self.pick_recent(&[Kind::User]) {
                    let tid = self.id(t);
                    let mut body = String::from(",\"targetId\":");
                    push_json_str(&mut body, &tid);
                    let _ = write!(body, ",\"label\":\"checkpoint-{}\"", self.rng.below(1000));
                    self.simple("label", &body)?;
                }
            }
            _ => {
                self.turn()?;
                self.turns += 1;
            }
        }
        Ok(())
    }

    /// Chats (with the housekeeping) until the session has `n` entries or is full.
    fn chat_until(&mut self, n: usize) -> std::io::Result<()> {
        while !self.full() && self.parent.len() < n {
            if !self.housekeeping()? {
                self.chat()?;
            }
        }
        Ok(())
    }

    /// A [`TreeShape::Spread`] session: forks at the positions in `fork_at`
    /// (sorted, latest first), far ones as detours.
    fn spread(&mut self, mut fork_at: Vec<usize>) -> std::io::Result<()> {
        while !self.full() {
            if self.housekeeping()? || self.end_detour()? {
                continue;
            }
            let n = self.parent.len();
            if self.detour.is_none() && fork_at.last().is_some_and(|&f| n >= f) {
                fork_at.pop();
                self.fork()?;
                continue;
            }
            self.chat()?;
        }
        Ok(())
    }

    /// A [`TreeShape::Regenerate`] session: about every `every` entries the
    /// leaf moves to the parent of the latest assistant message on the active
    /// path and a new reply (at most `every − 1` entries) is written there.
    /// Regenerations are due on a schedule, so a long turn is followed by a
    /// run of regenerations that catch up; one reply is regenerated at most
    /// 1–3 times in a row before the chat goes on.
    fn regenerate(&mut self, every: usize) -> std::io::Result<()> {
        let assistants = [Kind::AssistantTool, Kind::AssistantFinal];
        let mut due = every;
        // The fork point regenerated last, how often, and how often it may be.
        let (mut point, mut times, mut allowed) = (NONE, 0, 0);
        while !self.full() {
            if self.housekeeping()? {
                continue;
            }
            if self.parent.len() >= due {
                // Never a reply above the latest compaction: regenerating it
                // would abandon the compaction, which pi's users do not do.
                if let Some(latest) = self.find_up_until(&assistants, 64, Some(Kind::Compaction)) {
                    let p = self.parent[latest as usize];
                    if p != point {
                        (point, times, allowed) = (p, 0, self.rng.range(1, 3));
                    }
                    if times < allowed {
                        times += 1;
                        due += self.rng.range(every / 2, every + every / 2);
                        self.move_leaf(p)?;
                        self.forks += 1;
                        if !self.full() {
                            self.turn_body_within(every - 1)?;
                        }
                        continue;
                    }
                }
            }
            self.chat()?;
        }
        Ok(())
    }

    /// A [`TreeShape::Broom`] session: a handle of a few turns, a user message
    /// (the hub), up to `bristles` replies of 1–3 entries under it (the leaf
    /// moving back to the hub before each), then the chat goes on from the
    /// last bristle. Bristles are cut to what fits, keeping a tenth of the
    /// session for the chat after them.
    fn broom(&mut self, bristles: usize) -> std::io::Result<()> {
        let handle = self.rng.range(8, 24).min(self.target / 10);
        self.chat_until(handle)?;
        let tail = self.target / 10;
        if !self.full() {
            let hub = self.user()?;
            let room = self.target.saturating_sub(self.parent.len() + tail);
            let bristles = bristles.min(room / 2).max(1);
            for k in 0..bristles {
                if self.full() {
                    break;
                }
                self.housekeeping()?;
                if k > 0 && !self.full() {
                    self.move_leaf(hub)?;
                }
                if self.full() {
                    break;
                }
                // Leave each later bristle two entries (its move and a reply).
                let left = 2 * (bristles - k - 1) + tail;
                let room = self.target.saturating_sub(self.parent.len() + left);
                self.turn_body_within(room.clamp(1, 3))?;
                self.forks += 1;
            }
        }
        self.chat_until(self.target)
    }
}

/// Writes one session (header line, then `spec.entries` entries) to `out`.
/// The returned summary's `path` is empty; [`generate`] fills it in.
pub fn write_session<W: Write>(
    out: &mut W,
    spec: &SessionSpec,
) -> std::io::Result<GeneratedSession> {
    write_session_with_images(out, spec, 0.0, 0)
}

/// [`write_session`] where each tool result carries, with probability
/// `image_chance`, an inline base64 image of `image_len` characters (random
/// bytes, as incompressible as a PNG screenshot): the multi-gigabyte sessions
/// pi users report are made of these.
pub fn write_session_with_images<W: Write>(
    out: &mut W,
    spec: &SessionSpec,
    image_chance: f64,
    image_len: usize,
) -> std::io::Result<GeneratedSession> {
    let created_at = iso_millis(spec.created_ms);
    let mut header = String::with_capacity(160);
    header.push_str("{\"type\":\"session\",\"version\":3,\"id\":");
    push_json_str(&mut header, &spec.id);
    header.push_str(",\"timestamp\":");
    push_json_str(&mut header, &created_at);
    header.push_str(",\"cwd\":");
    push_json_str(&mut header, &spec.cwd);
    header.push_str("}\n");
    out.write_all(header.as_bytes())?;
    let mut rng = SplitMix64::new(spec.seed);
    let every = spec.compaction_every;
    let first_compaction = if every == 0 {
        usize::MAX
    } else {
        rng.range(every * 9 / 10, every * 11 / 10).max(1)
    };
    // Fork points, spread over the session (never in its first 2%).
    let spread = spec.tree == TreeShape::Spread;
    let mut fork_at: Vec<usize> = (0..if spread { spec.forks } else { 0 })
        .map(|_| {
            let lo = spec.entries / 50;
            rng.range(lo, (spec.entries * 19 / 20).max(lo))
        })
        .collect();
    fork_at.sort_unstable();
    fork_at.reverse();
    let ids = SessionIds::new(spec.seed);
    let mut b = Builder::new(out, rng, ids, spec.entries, spec.created_ms);
    b.bytes = header.len() as u64;
    b.images = (image_chance, image_len);
    b.next_compaction = first_compaction;
    b.compaction_every = every.max(1);
    // The id entry 2^32 − 1 would have: no generated session reaches it.
    b.root_parent = spec.dangling_root.then(|| ids.id(u32::MAX));
    match spec.tree {
        TreeShape::Spread => b.spread(fork_at)?,
        TreeShape::Regenerate { every } => b.regenerate(every.max(2))?,
        TreeShape::Caterpillar { every } => {
            b.side_every = every.max(1);
            b.chat_until(spec.entries)?;
        }
        TreeShape::Broom => b.broom(spec.forks)?,
    }
    let leaf_id = (b.leaf != NONE).then(|| b.id(b.leaf));
    let leaf_depth = if b.leaf == NONE {
        0
    } else {
        b.depth[b.leaf as usize] as usize
    };
    Ok(GeneratedSession {
        path: PathBuf::new(),
        id: spec.id.clone(),
        cwd: spec.cwd.clone(),
        created_at,
        seed: spec.seed,
        entries: b.parent.len(),
        bytes: b.bytes,
        forks: b.forks,
        compactions: b.compactions,
        leaf_id,
        leaf_depth,
        max_depth: b.depth.iter().copied().max().unwrap_or(0) as usize,
    })
}

/// A realistic message entry (a user message, an assistant message with a
/// tool call, or a tool result, chosen by `seed`) with the given id, parent
/// and time, as one line without the newline: what benchmarks append.
pub fn message_entry(seed: u64, id: &str, parent: Option<&str>, timestamp_ms: i64) -> String {
    let mut sink = Vec::new();
    let mut b = Builder::new(
        &mut sink,
        SplitMix64::new(seed),
        SessionIds::new(seed),
        usize::MAX,
        timestamp_ms - 1,
    );
    let written = match b.rng.below(3) {
        0 => b.user().map(|_| ()),
        1 => b.assistant(Some("bash")).map(|_| ()),
        _ => b
            .tool_result("bash", "toolu_0000000000000000000000000")
            .map(|_| ()),
    };
    written.expect("writing to a Vec cannot fail");
    let line = b.line.trim_end_matches('\n');
    // Replace the generated id and parent with the caller's.
    let rest = line.split_once(",\"timestamp\":").map_or("", |(_, r)| r);
    let ty_end = line.find(",\"id\":").unwrap_or(0);
    let mut out = String::with_capacity(line.len() + 16);
    out.push_str(&line[..ty_end]);
    out.push_str(",\"id\":");
    push_json_str(&mut out, id);
    out.push_str(",\"parentId\":");
    match parent {
        Some(p) => push_json_str(&mut out, p),
        None => out.push_str("null"),
    }
    out.push_str(",\"timestamp\":");
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_matches_javascript() {
        assert_eq!(iso_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_millis(BASE_MS), "2025-06-01T00:00:00.000Z");
        assert_eq!(iso_millis(951_782_400_123), "2000-02-29T00:00:00.123Z");
    }

    #[test]
    fn ids_are_distinct() {
        let ids = SessionIds::new(7);
        let set: std::collections::HashSet<String> = (0..100_000).map(|i| ids.id(i)).collect();
        assert_eq!(set.len(), 100_000);
    }

    #[test]
    fn escapes_like_json_stringify() {
        let mut s = String::new();
        push_json_str(&mut s, "a\"b\\c\nd\u{1}é");
        assert_eq!(s, "\"a\\\"b\\\\c\\nd\\u0001é\"");
        assert_eq!(s, sessiontree::json::string_literal("a\"b\\c\nd\u{1}é"));
    }

    #[test]
    fn message_entry_is_valid() {
        for seed in 0..6 {
            let line = message_entry(seed, "abcd1234", Some("ffff0000"), BASE_MS);
            let e = sessiontree::Entry::from_stored_line(&line).expect("valid entry");
            assert_eq!(e.id(), "abcd1234");
            assert_eq!(e.parent_id(), Some("ffff0000"));
        }
    }
}
