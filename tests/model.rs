//! Model-based property test: random operation sequences run on each durable
//! backend and on the in-memory reference; everything observable must match,
//! including after reopening. Some cases start from a small generated session
//! of any shape (the *shape prelude*: regenerations, caterpillars, brooms,
//! dangling roots, frequent compactions), which the operations then extend.

#[path = "conformance/harness.rs"]
#[allow(dead_code)]
mod harness;

use harness::{snapshot_from, Harness, Jsonl, Memory, Postgres, Sqlite};
use proptest::prelude::*;
use serde_json::{json, Value};
use sessiontree::{Entry, SessionStorage};
use sessiontree_bench::gen::{write_session, GenOptions, Shape};

/// A generated session a case starts from.
#[derive(Debug, Clone)]
struct Prelude {
    shape: Shape,
    entries: usize,
    compaction_every: usize,
    seed: u64,
}

fn prelude_strategy() -> impl Strategy<Value = Option<Prelude>> {
    let shape = proptest::sample::select(Shape::ALL.to_vec());
    let compaction_every = prop_oneof![Just(0usize), 4usize..12, 20usize..80];
    proptest::option::weighted(
        0.2,
        (shape, 20usize..=200, compaction_every, any::<u64>()).prop_map(
            |(shape, entries, compaction_every, seed)| Prelude {
                shape,
                entries,
                compaction_every,
                seed,
            },
        ),
    )
}

/// The prelude's entries: its session as `sessiontree gen` writes it (an
/// archive's first session), one entry a line.
fn prelude_entries(prelude: Option<&Prelude>) -> Vec<Entry> {
    let Some(p) = prelude else {
        return Vec::new();
    };
    let options = GenOptions {
        shape: p.shape,
        entries: p.entries,
        compaction_every: p.compaction_every,
        seed: p.seed,
        ..GenOptions::default()
    };
    let mut text = Vec::new();
    write_session(&mut text, &options.session_specs()[0]).expect("writing to a Vec");
    let text = String::from_utf8(text).expect("UTF-8");
    text.lines()
        .skip(1)
        .map(|l| Entry::from_stored_line(l).expect("generated entries are valid"))
        .collect()
}

/// Which entry a new entry hangs from.
#[derive(Debug, Clone)]
enum Parent {
    /// The current leaf (what the session layer does).
    Leaf,
    /// An earlier entry (a fork or regeneration).
    Earlier(usize),
    /// `null`: a new root.
    Root,
    /// An id that never exists (forks cut at a compaction look like this).
    Missing,
}

#[derive(Debug, Clone)]
enum Op {
    Message {
        parent: Parent,
        role: u8,
        usage: bool,
    },
    Compaction {
        parent: Parent,
        first_kept: Option<usize>,
        retained_tail: bool,
    },
    MoveLeaf(Option<usize>),
    Label {
        target: usize,
        text: Option<String>,
    },
    Name(Option<String>),
    BranchSummary {
        parent: Parent,
        empty: bool,
    },
    Custom {
        parent: Parent,
    },
    Reopen,
}

fn parent_strategy() -> impl Strategy<Value = Parent> {
    prop_oneof![
        6 => Just(Parent::Leaf),
        3 => any::<usize>().prop_map(Parent::Earlier),
        1 => Just(Parent::Root),
        1 => Just(Parent::Missing),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let text = prop_oneof![
        Just(None),
        Just(Some(String::from("  "))),
        "[a-z ]{0,6}".prop_map(Some)
    ];
    prop_oneof![
        8 => (parent_strategy(), 0u8..3, any::<bool>()).prop_map(|(parent, role, usage)| Op::Message { parent, role, usage }),
        2 => (parent_strategy(), proptest::option::of(any::<usize>()), any::<bool>())
            .prop_map(|(parent, first_kept, retained_tail)| Op::Compaction { parent, first_kept, retained_tail }),
        3 => proptest::option::weighted(0.85, any::<usize>()).prop_map(Op::MoveLeaf),
        1 => (any::<usize>(), text.clone()).prop_map(|(target, text)| Op::Label { target, text }),
        1 => text.prop_map(Op::Name),
        1 => (parent_strategy(), any::<bool>()).prop_map(|(parent, empty)| Op::BranchSummary { parent, empty }),
        1 => parent_strategy().prop_map(|parent| Op::Custom { parent }),
        1 => Just(Op::Reopen),
    ]
}

/// Turns operations into the entries they append after `prelude` (ids are
/// deterministic, so every backend receives the same text); `None` stands
/// for a reopen.
fn entries_for(prelude: &[Entry], ops: &[Op]) -> Vec<Option<Entry>> {
    let mut ids: Vec<String> = prelude.iter().map(|e| e.id().to_owned()).collect();
    let mut leaf: Option<String> = None;
    for e in prelude {
        leaf = e.facts().leaf_after().map(str::to_owned);
    }
    let mut out = Vec::new();
    for (n, op) in ops.iter().enumerate() {
        let id = format!("e{n}");
        let ts = format!("2025-01-01T00:00:{:02}.{:03}Z", n % 60, n);
        let pick =
            |i: usize| -> Option<String> { (!ids.is_empty()).then(|| ids[i % ids.len()].clone()) };
        let parent_of = |p: &Parent| -> Value {
            match p {
                Parent::Leaf => json!(leaf),
                Parent::Earlier(i) => json!(pick(*i).or(leaf.clone())),
                Parent::Root => Value::Null,
                Parent::Missing => json!(format!("ghost{n}")),
            }
        };
        let v = match op {
            Op::Reopen => {
                out.push(None);
                continue;
            }
            Op::Message {
                parent,
                role,
                usage,
            } => {
                let role = ["user", "assistant", "toolResult"][*role as usize];
                let mut m = json!({"role": role, "content": [{"type": "text", "text": format!("text {n}")}]});
                if role == "assistant" {
                    m["provider"] = json!("p");
                    m["model"] = json!(format!("m{}", n % 3));
                    if *usage {
                        m["usage"] = json!({"input": n, "output": 2, "cacheRead": 3, "cacheWrite": 4, "totalTokens": 9, "cost": {"total": 0.001 * n as f64}});
                    }
                }
                json!({"type": "message", "id": id, "parentId": parent_of(parent), "timestamp": ts, "message": m})
            }
            Op::Compaction {
                parent,
                first_kept,
                retained_tail,
            } => {
                let mut v = json!({"type": "compaction", "id": id, "parentId": parent_of(parent), "timestamp": ts, "summary": format!("summary {n}"), "tokensBefore": n});
                if let Some(k) = first_kept {
                    v["firstKeptEntryId"] = json!(pick(*k).unwrap_or_else(|| "nobody".into()));
                }
                if *retained_tail {
                    v["retainedTail"] = json!([{"role": "user", "content": "kept"}]);
                }
                v
            }
            Op::MoveLeaf(target) => {
                let target = target.and_then(pick);
                json!({"type": "leaf", "id": id, "parentId": leaf, "timestamp": ts, "targetId": target})
            }
            Op::Label { target, text } => {
                let mut v = json!({"type": "label", "id": id, "parentId": leaf, "timestamp": ts, "targetId": pick(*target).unwrap_or_else(|| "nobody".into())});
                if let Some(t) = text {
                    v["label"] = json!(t);
                }
                v
            }
            Op::Name(name) => {
                let mut v =
                    json!({"type": "session_info", "id": id, "parentId": leaf, "timestamp": ts});
                if let Some(t) = name {
                    v["name"] = json!(t);
                }
                v
            }
            Op::BranchSummary { parent, empty } => {
                let summary = if *empty {
                    String::new()
                } else {
                    format!("left {n}")
                };
                json!({"type": "branch_summary", "id": id, "parentId": parent_of(parent), "timestamp": ts, "fromId": "x", "summary": summary})
            }
            Op::Custom { parent } => {
                json!({"type": "custom", "id": id, "parentId": parent_of(parent), "timestamp": ts, "customType": "c", "data": {"n": n}})
            }
        };
        let e = Entry::from_value(&v).expect("generated entries are valid");
        leaf = e.facts().leaf_after().map(str::to_owned);
        ids.push(id);
        out.push(Some(e));
    }
    out
}

/// Appends the prelude, then runs the plan on `h`, returning the snapshot
/// after the prelude (if any) and after every step. After a prelude the log
/// is long and a full snapshot slow (a path per entry), so until the last
/// step a snapshot has the path of the last entry only (every entry's path
/// is compared when it is appended, and all of them after the last step; a
/// reopen checks the SQLite branch cache against its rebuild).
fn run<H: Harness>(h: &mut H, prelude: &[Entry], plan: &[Option<Entry>]) -> Vec<String> {
    let mut s = Some(h.fresh());
    let mut snaps = Vec::new();
    let snap = |st: &H::S, last: bool| {
        let from = if prelude.is_empty() || last {
            0
        } else {
            st.entry_count().expect("count").saturating_sub(1)
        };
        snapshot_from(st, from).expect("snapshot")
    };
    if !prelude.is_empty() {
        let st = s.as_mut().expect("open");
        for e in prelude {
            st.append_entry(e.clone()).expect("append");
        }
        snaps.push(snap(st, plan.is_empty()));
    }
    for (i, step) in plan.iter().enumerate() {
        match step {
            Some(e) => s
                .as_mut()
                .expect("open")
                .append_entry(e.clone())
                .expect("append"),
            None => s = Some(h.reopen(s.take().expect("open"))),
        }
        snaps.push(snap(s.as_ref().expect("open"), i + 1 == plan.len()));
    }
    snaps
}

fn compare<H: Harness>(
    mut h: H,
    prelude: Option<&Prelude>,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let start = prelude_entries(prelude);
    let plan = entries_for(&start, ops);
    let expected = run(&mut Memory, &start, &plan);
    let actual = run(&mut h, &start, &plan);
    let steps = prelude
        .map(|p| format!("the prelude {p:?}"))
        .into_iter()
        .chain(
            ops.iter()
                .enumerate()
                .map(|(i, op)| format!("step {i} ({op:?})")),
        );
    for ((e, a), step) in expected.iter().zip(&actual).zip(steps) {
        prop_assert_eq!(e, a, "after {}", step);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 36, ..ProptestConfig::default() })]

    #[test]
    fn jsonl_answers_like_memory(
        prelude in prelude_strategy(),
        ops in proptest::collection::vec(op_strategy(), 1..40),
    ) {
        compare(Jsonl::new(), prelude.as_ref(), &ops)?;
    }

    #[test]
    fn sqlite_answers_like_memory(
        prelude in prelude_strategy(),
        ops in proptest::collection::vec(op_strategy(), 1..40),
    ) {
        compare(Sqlite::new(), prelude.as_ref(), &ops)?;
    }

    #[test]
    fn postgres_answers_like_memory(
        prelude in prelude_strategy(),
        ops in proptest::collection::vec(op_strategy(), 1..40),
    ) {
        // Without a server this is skipped (said once on stderr).
        if let Some(h) = Postgres::new() {
            compare(h, prelude.as_ref(), &ops)?;
        }
    }
}
