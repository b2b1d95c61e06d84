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
//! # Entry ids
//! Entry `i` of a session has the id [`SessionIds::id`]`(i)`: eight hex digits
//! from a bijection of `i`, so ids never collide and a benchmark can name a
//! random existing entry without reading the file.

use crate::backend::jsonl::{encode_cwd, session_file_name};
use crate::error::{Error, Result};
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
}

impl Shape {
    /// The shape's name as the CLI spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Shape::Linear => "linear",
            Shape::Forked => "forked",
            Shape::Archive => "archive",
        }
    }
}

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenOptions {
    /// The shape.
    pub shape: Shape,
    /// Entries in all (for an archive: summed over its sessions).
    pub entries: usize,
    /// Forks (forked shape; for an archive, summed over its sessions). `None`
    /// means one per 100 entries for `forked`, one per 150 for `archive`.
    pub forks: Option<usize>,
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
    /// Forks made (regenerations plus moves back).
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
    /// Forks to make.
    pub forks: usize,
    /// About how many entries between compactions (0: none).
    pub compaction_every: usize,
    /// Seed of the entries.
    pub seed: u64,
}

const BASE_MS: i64 = 1_748_736_000_000; // 2025-06-01T00:00:00.000Z

/// Generates a workload under `out` (created if needed) in pi's layout.
pub fn generate(out: &Path, options: &GenOptions) -> Result<GenReport> {
    // Each shape draws from its own stream, so two shapes generated with the
    // same seed never share session ids (they can be imported side by side).
    let salt = match options.shape {
        Shape::Linear => 0x6c69_6e65_6172,
        Shape::Forked => 0x666f_726b_6564,
        Shape::Archive => 0x6172_6368_6976,
    };
    let mut rng = SplitMix64::new(options.seed).fork(salt);
    let specs = match options.shape {
        Shape::Linear | Shape::Forked => {
            let cwd = options
                .cwd
                .clone()
                .unwrap_or_else(|| "/home/dev/projects/sessiontree".to_owned());
            let created_ms = BASE_MS + rng.below(86_400_000) as i64;
            let forks = match options.shape {
                Shape::Linear => 0,
                _ => options.forks.unwrap_or(options.entries / 100),
            };
            vec![SessionSpec {
                id: uuid_v7(created_ms, &mut rng),
                created_ms,
                cwd,
                entries: options.entries,
                forks,
                compaction_every: options.compaction_every,
                seed: rng.next_u64(),
            }]
        }
        Shape::Archive => archive_specs(options, &mut rng),
    };
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
        })
        .collect()
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
    let mut s = String::with_capacity(24);
    push_iso_millis(&mut s, ms);
    s
}

fn push_iso_millis(out: &mut String, ms: i64) {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let _ = write!(
        out,
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    );
}

/// Appends `s` as a JSON string literal, escaped as `JSON.stringify` does.
fn push_json_str(out: &mut String, s: &str) {
    crate::json::push_string_literal(out, s);
}

/// A number as JavaScript prints it.
fn push_js_number(out: &mut String, x: f64) {
    out.push_str(&crate::json::js_number_text(x));
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
}

impl<W: Write> Builder<'_, W> {
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
            self.line.push_str("null");
        } else {
            let p = self.id(parent);
            push_json_str(&mut self.line, &p);
        }
        self.line.push_str(",\"timestamp\":\"");
        let now = self.now_ms;
        push_iso_millis(&mut self.line, now);
        self.line.push('"');
        index
    }

    /// Ends the line started by [`Builder::begin`], records the entry and
    /// writes it. `leaf_after` is the leaf the entry leaves (itself, or a
    /// `leaf` entry's target).
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
        Ok(index)
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
        self.line
            .push_str(",\"content\":[{\"type\":\"text\",\"text\":");
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
        let i = self.finish(parent, Kind::Other, self.parent.len() as u32)?;
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
        let mut i = self.leaf;
        for _ in 0..self.rng.range(2, 40) {
            if i == NONE {
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
        let calls = match self.rng.below(10) {
            0..=1 => 0,
            2..=4 => 1,
            5..=6 => 2,
            7..=8 => 3,
            _ => self.rng.range(4, 8),
        };
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
}

/// Writes one session (header line, then `spec.entries` entries) to `out`.
/// The returned summary's `path` is empty; [`generate`] fills it in.
pub fn write_session<W: Write>(
    out: &mut W,
    spec: &SessionSpec,
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
    let mut fork_at: Vec<usize> = (0..spec.forks)
        .map(|_| {
            let lo = spec.entries / 50;
            rng.range(lo, (spec.entries * 19 / 20).max(lo))
        })
        .collect();
    fork_at.sort_unstable();
    fork_at.reverse();
    let mut b = Builder {
        out,
        rng,
        ids: SessionIds::new(spec.seed),
        target: spec.entries,
        parent: Vec::with_capacity(spec.entries),
        depth: Vec::with_capacity(spec.entries),
        kind: Vec::with_capacity(spec.entries),
        leaf: NONE,
        now_ms: spec.created_ms,
        line: String::with_capacity(8192),
        bytes: header.len() as u64,
        model: 0,
        compactions: 0,
        forks: 0,
        since_compaction: 0,
        next_compaction: first_compaction,
        compaction_every: every.max(1),
        detour: None,
    };
    let mut turns = 0usize;
    let mut named = false;
    while !b.full() {
        let n = b.parent.len();
        if n == 0 {
            b.model_change()?;
            if !b.full() {
                b.thinking_change()?;
            }
            continue;
        }
        if every > 0 && b.since_compaction >= b.next_compaction {
            b.compaction()?;
            continue;
        }
        if b.end_detour()? {
            continue;
        }
        if b.detour.is_none() && fork_at.last().is_some_and(|&f| n >= f) {
            fork_at.pop();
            b.fork()?;
            continue;
        }
        if turns == 1 && !named {
            named = true;
            let len = b.rng.range(3, 7);
            let mut name = String::new();
            for k in 0..len {
                if k > 0 {
                    name.push(' ');
                }
                name.push_str(word(&mut b.rng));
            }
            let mut body = String::from(",\"name\":");
            push_json_str(&mut body, &name);
            b.simple("session_info", &body)?;
            continue;
        }
        match b.rng.below(1000) {
            0..=24 => {
                b.model_change()?;
            }
            25..=54 => {
                b.thinking_change()?;
            }
            55..=64 => {
                let body = "\"activeToolNames\":[\"read\",\"bash\",\"edit\",\"write\",\"grep\"]";
                let body = format!(",{body}");
                b.simple("active_tools_change", &body)?;
            }
            65..=104 => {
                // Label a recent user message on the active path.
                if let Some(t) = b.pick_recent(&[Kind::User]) {
                    let tid = b.id(t);
                    let mut body = String::from(",\"targetId\":");
                    push_json_str(&mut body, &tid);
                    let _ = write!(body, ",\"label\":\"checkpoint-{}\"", b.rng.below(1000));
                    b.simple("label", &body)?;
                }
            }
            _ => {
                b.turn()?;
                turns += 1;
            }
        }
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
    let spec = SessionSpec {
        id: String::new(),
        created_ms: timestamp_ms,
        cwd: String::new(),
        entries: 0,
        forks: 0,
        compaction_every: 0,
        seed,
    };
    let mut b = Builder {
        out: &mut sink,
        rng: SplitMix64::new(seed),
        ids: SessionIds::new(spec.seed),
        target: usize::MAX,
        parent: Vec::new(),
        depth: Vec::new(),
        kind: Vec::new(),
        leaf: NONE,
        now_ms: timestamp_ms - 1,
        line: String::new(),
        bytes: 0,
        model: 0,
        compactions: 0,
        forks: 0,
        since_compaction: 0,
        next_compaction: usize::MAX,
        compaction_every: 1,
        detour: None,
    };
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
        assert_eq!(s, crate::json::string_literal("a\"b\\c\nd\u{1}é"));
    }

    #[test]
    fn message_entry_is_valid() {
        for seed in 0..6 {
            let line = message_entry(seed, "abcd1234", Some("ffff0000"), BASE_MS);
            let e = crate::Entry::from_stored_line(&line).expect("valid entry");
            assert_eq!(e.id(), "abcd1234");
            assert_eq!(e.parent_id(), Some("ffff0000"));
        }
    }
}
