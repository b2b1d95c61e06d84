//! Model-based property test: random operation sequences run on each durable
//! backend and on the in-memory reference; everything observable must match,
//! including after reopening.

#[path = "conformance/harness.rs"]
#[allow(dead_code)]
mod harness;

use harness::{snapshot, Harness, Jsonl, Memory, Sqlite};
use proptest::prelude::*;
use serde_json::{json, Value};
use sessiontree::{Entry, SessionStorage};

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

/// Turns operations into the entries they append (ids are deterministic, so
/// every backend receives the same text); `None` stands for a reopen.
fn entries_for(ops: &[Op]) -> Vec<Option<Entry>> {
    let mut ids: Vec<String> = Vec::new();
    let mut leaf: Option<String> = None;
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

/// Runs the plan on `h`, returning the snapshot after every step.
fn run<H: Harness>(h: &mut H, plan: &[Option<Entry>]) -> Vec<String> {
    let mut s = Some(h.fresh());
    let mut snaps = Vec::new();
    for step in plan {
        match step {
            Some(e) => s
                .as_mut()
                .expect("open")
                .append_entry(e.clone())
                .expect("append"),
            None => s = Some(h.reopen(s.take().expect("open"))),
        }
        snaps.push(snapshot(s.as_ref().expect("open")).expect("snapshot"));
    }
    snaps
}

fn compare<H: Harness>(mut h: H, ops: &[Op]) -> Result<(), TestCaseError> {
    let plan = entries_for(ops);
    let expected = run(&mut Memory, &plan);
    let actual = run(&mut h, &plan);
    for (i, (e, a)) in expected.iter().zip(&actual).enumerate() {
        prop_assert_eq!(e, a, "after step {} ({:?})", i, ops[i]);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn jsonl_answers_like_memory(ops in proptest::collection::vec(op_strategy(), 1..40)) {
        compare(Jsonl::new(), &ops)?;
    }

    #[test]
    fn sqlite_answers_like_memory(ops in proptest::collection::vec(op_strategy(), 1..40)) {
        compare(Sqlite::new(), &ops)?;
    }
}
