//! The contract's rules, one case per rule, generic over the backend.
//! Each case starts from a fresh session; `cases!` defines it and registers it
//! with `conformance!`, which `main.rs` instantiates for every backend.

use super::harness::{snapshot, Harness};
use serde_json::{json, Value};
use sessiontree::context::{ContextOptions, EntryProjector, EntryTransform};
use sessiontree::json::JsString;
use sessiontree::repo::entries_to_fork;
use sessiontree::rules::ForkPosition;
use sessiontree::session::{BranchSummary, Compaction};
use sessiontree::{Entry, ErrorCode, JsonText, Session, SessionStorage};

type R = Result<(), Box<dyn std::error::Error>>;

/// An entry from a JSON value (keys sorted: fine for tests that do not check order).
fn entry(v: Value) -> Entry {
    Entry::from_value(&v).expect("valid test entry")
}

fn message(id: &str, parent: Option<&str>, role: &str, text: &str) -> Entry {
    entry(
        json!({"type": "message", "id": id, "parentId": parent, "timestamp": "2025-01-01T00:00:00.000Z",
                 "message": {"role": role, "content": text}}),
    )
}

fn ids(entries: &[Entry]) -> Vec<&str> {
    entries.iter().map(Entry::id).collect()
}

fn append_all<S: SessionStorage>(s: &mut S, entries: &[Entry]) {
    for e in entries {
        s.append_entry(e.clone()).expect("append");
    }
}

/// A chain a ← b ← c of messages.
fn chain<S: SessionStorage>(s: &mut S) {
    append_all(
        s,
        &[
            message("a", None, "user", "one"),
            message("b", Some("a"), "assistant", "two"),
            message("c", Some("b"), "user", "three"),
        ],
    );
}

fn compaction(id: &str, parent: &str, first_kept: Option<&str>, retained: bool) -> Entry {
    let mut v = json!({"type":"compaction","id":id,"parentId":parent,"timestamp":"t","summary":format!("sum {id}"),"tokensBefore":100});
    if let Some(k) = first_kept {
        v["firstKeptEntryId"] = json!(k);
    }
    if retained {
        v["retainedTail"] = json!([{"role":"user","content":"kept"}]);
    }
    entry(v)
}

/// m1 ← m2 ← m3 ← m4 ← … a linear run of messages.
fn messages<S: SessionStorage>(s: &mut S, from: usize, to: usize, parent: Option<&str>) {
    let mut parent = parent.map(str::to_owned);
    for i in from..=to {
        let id = format!("m{i}");
        s.append_entry(message(
            &id,
            parent.as_deref(),
            if i % 2 == 1 { "user" } else { "assistant" },
            &id,
        ))
        .expect("append");
        parent = Some(id);
    }
}

cases! {
    suite = conformance, module = cases, harness = Harness;

    fn empty_session_has_no_leaf_entries_or_stats(h) {
        let s = h.fresh();
        assert_eq!(s.leaf_id()?, None);
        assert!(s.entries(0, None)?.is_empty());
        assert_eq!(s.session_name()?, None);
        assert_eq!(s.session_stats()?.message_count, 0);
        assert!(s.path_to_root_or_compaction(None)?.is_empty());
        assert!(!s.metadata()?.id.is_empty());
        Ok(())
    }

    fn append_moves_leaf_to_entry_and_leaf_entry_to_target(h) {
        let mut s = h.fresh();
        chain(&mut s);
        assert_eq!(s.leaf_id()?.as_deref(), Some("c"));
        s.append_entry(entry(
            json!({"type":"leaf","id":"l1","parentId":"c","timestamp":"t","targetId":"a"}),
        ))?;
        assert_eq!(s.leaf_id()?.as_deref(), Some("a"));
        s.append_entry(entry(
            json!({"type":"leaf","id":"l2","parentId":"a","timestamp":"t","targetId":null}),
        ))?;
        assert_eq!(s.leaf_id()?, None);
        let s = h.reopen(s);
        assert_eq!(s.leaf_id()?, None);
        assert_eq!(s.entry_count()?, 5);
        Ok(())
    }

    fn set_leaf_appends_a_leaf_entry_with_previous_leaf_as_parent(h) {
        let mut s = h.fresh();
        chain(&mut s);
        s.set_leaf_id(Some("a"))?;
        let log = s.entries(0, None)?;
        let leaf = log.last().expect("leaf entry");
        assert_eq!(leaf.entry_type().as_str(), "leaf");
        assert_eq!(leaf.parent_id(), Some("c"));
        assert_eq!(leaf.facts().target_id.as_deref(), Some("a"));
        assert_eq!(leaf.id().len(), 8);
        assert_eq!(s.leaf_id()?.as_deref(), Some("a"));
        s.set_leaf_id(None)?;
        assert_eq!(s.leaf_id()?, None);
        let last = s.entries(4, None)?;
        assert_eq!(last[0].parent_id(), Some("a"));
        assert!(last[0].json().contains(r#""targetId":null"#));
        Ok(())
    }

    fn set_leaf_to_unknown_entry_is_not_found_and_writes_nothing(h) {
        let mut s = h.fresh();
        chain(&mut s);
        let err = s.set_leaf_id(Some("nope")).expect_err("unknown target");
        assert_eq!(err.code(), ErrorCode::NotFound);
        assert_eq!(err.to_string(), "Entry nope not found");
        assert_eq!(s.entry_count()?, 3);
        let s = h.reopen(s);
        assert_eq!(s.entry_count()?, 3);
        assert_eq!(s.leaf_id()?.as_deref(), Some("c"));
        Ok(())
    }

    fn leaf_naming_a_missing_entry_is_invalid_session(h) {
        let mut s = h.fresh();
        chain(&mut s);
        s.append_entry(entry(
            json!({"type":"leaf","id":"l","parentId":"c","timestamp":"t","targetId":"ghost"}),
        ))?;
        let err = s.leaf_id().expect_err("dangling leaf");
        assert_eq!(err.code(), ErrorCode::InvalidSession);
        assert_eq!(err.to_string(), "Entry ghost not found");
        Ok(())
    }

    fn created_entry_ids_are_short_and_unused(h) {
        let mut s = h.fresh();
        chain(&mut s);
        for _ in 0..20 {
            let id = s.create_entry_id()?;
            assert_eq!(id.len(), 8, "the random tail of a UUIDv7");
            assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
            assert!(s.entry(&id)?.is_none());
        }
        Ok(())
    }

    fn duplicate_ids_shadow_in_pi_or_are_refused(h) {
        let mut s = h.fresh();
        chain(&mut s);
        let dup = message("b", Some("c"), "user", "again");
        let result = s.append_entry(dup.clone());
        if H::REFUSES_DUPLICATE_IDS {
            let err = result.expect_err("duplicate refused");
            assert_eq!(err.code(), ErrorCode::InvalidEntry);
            assert!(err.to_string().contains("Entry b already exists"));
            assert_eq!(s.entry_count()?, 3);
            assert_eq!(s.leaf_id()?.as_deref(), Some("c"));
        } else {
            result?;
            assert_eq!(s.entry_count()?, 4, "both stay in the log");
            assert_eq!(
                s.entry("b")?.map(|e| e.json().to_owned()),
                Some(dup.json().to_owned())
            );
            let s = h.reopen(s);
            assert_eq!(
                s.entry("b")?.map(|e| e.json().to_owned()),
                Some(dup.json().to_owned())
            );
        }
        Ok(())
    }

    fn find_entries_returns_one_type_in_log_order(h) {
        let mut s = h.fresh();
        chain(&mut s);
        s.set_leaf_id(Some("a"))?;
        append_all(&mut s, &[message("d", Some("a"), "user", "four")]);
        assert_eq!(ids(&s.find_entries("message")?), ["a", "b", "c", "d"]);
        assert_eq!(s.find_entries("leaf")?.len(), 1);
        assert!(s.find_entries("compaction")?.is_empty());
        Ok(())
    }

    fn labels_are_trimmed_replaced_and_cleared(h) {
        let mut s = h.fresh();
        chain(&mut s);
        let label = |id: &str, text: Option<&str>| {
            let mut v = json!({"type":"label","id":id,"parentId":"c","timestamp":"t","targetId":"a"});
            if let Some(t) = text {
                v["label"] = json!(t);
            }
            entry(v)
        };
        s.append_entry(label("l1", Some("  first  ")))?;
        assert_eq!(
            s.label("a")?.map(|s| s.to_string_lossy()).as_deref(),
            Some("first")
        );
        s.append_entry(label("l2", Some("second")))?;
        assert_eq!(
            s.label("a")?.map(|s| s.to_string_lossy()).as_deref(),
            Some("second")
        );
        s.append_entry(label("l3", Some("   ")))?;
        assert_eq!(s.label("a")?, None, "blank clears");
        s.append_entry(label("l4", Some("back")))?;
        s.append_entry(label("l5", None))?;
        assert_eq!(s.label("a")?, None, "absent clears");
        s.append_entry(label("l6", Some("final")))?;
        assert_eq!(s.label("b")?, None);
        let s = h.reopen(s);
        assert_eq!(
            s.label("a")?.map(|s| s.to_string_lossy()).as_deref(),
            Some("final")
        );
        Ok(())
    }

    fn session_name_is_the_last_session_info_trimmed(h) {
        let mut s = h.fresh();
        let info = |id: &str, name: Option<&str>| {
            let mut v = json!({"type":"session_info","id":id,"parentId":null,"timestamp":"t"});
            if let Some(n) = name {
                v["name"] = json!(n);
            }
            entry(v)
        };
        s.append_entry(info("n1", Some("  Alpha ")))?;
        assert_eq!(
            s.session_name()?.map(|s| s.to_string_lossy()).as_deref(),
            Some("Alpha")
        );
        s.append_entry(info("n2", Some("  ")))?;
        assert_eq!(
            s.session_name()?,
            None,
            "a later blank name hides earlier ones"
        );
        s.append_entry(info("n3", Some("Beta")))?;
        s.append_entry(info("n4", None))?;
        assert_eq!(s.session_name()?, None);
        s.append_entry(info("n5", Some("Gamma")))?;
        let s = h.reopen(s);
        assert_eq!(
            s.session_name()?.map(|s| s.to_string_lossy()).as_deref(),
            Some("Gamma")
        );
        Ok(())
    }

    fn stats_sum_complete_usage_over_every_branch(h) {
        let mut s = h.fresh();
        let usage = |i: f64, o: f64, cr: f64, cw: f64, cost: f64| json!({"input": i, "output": o, "cacheRead": cr, "cacheWrite": cw, "totalTokens": 0, "cost": {"total": cost}});
        let assistant = |id: &str, parent: Option<&str>, u: Value| {
            entry(
                json!({"type":"message","id":id,"parentId":parent,"timestamp":"t","message":{"role":"assistant","provider":"p","model":"m","usage":u}}),
            )
        };
        append_all(
            &mut s,
            &[
                message("u1", None, "user", "hi"),
                assistant("a1", Some("u1"), usage(10.0, 5.0, 100.0, 20.0, 0.1)),
                assistant("a2", Some("u1"), usage(1.0, 2.0, 3.0, 4.0, 0.2)),
                assistant(
                    "a3",
                    Some("a1"),
                    json!({"input": 1, "output": 1, "cacheRead": 1, "cacheWrite": 1, "cost": {}}),
                ),
                entry(
                    json!({"type":"message","id":"u2","parentId":"a1","timestamp":"t","message":{"role":"user","usage":usage(9.0,9.0,9.0,9.0,9.0)}}),
                ),
                entry(
                    json!({"type":"compaction","id":"c1","parentId":"u2","timestamp":"t","summary":"s","tokensBefore":1,"usage":usage(1.0,1.0,1.0,1.0,0.5)}),
                ),
                entry(
                    json!({"type":"branch_summary","id":"b1","parentId":"c1","timestamp":"t","fromId":"a2","summary":"s","usage":usage(2.0,0.0,0.0,0.0,0.25)}),
                ),
            ],
        );
        let st = s.session_stats()?;
        assert_eq!(st.message_count, 5);
        assert_eq!(st.cached_tokens, 104.0);
        assert_eq!(
            st.uncached_tokens,
            10.0 + 20.0 + 1.0 + 4.0 + 1.0 + 1.0 + 2.0
        );
        assert_eq!(st.total_tokens, 135.0 + 10.0 + 4.0 + 2.0);
        assert_eq!(st.cost_total, 0.1 + 0.2 + 0.5 + 0.25);
        let s = h.reopen(s);
        assert_eq!(s.session_stats()?, st);
        assert_eq!(
            s.session_stats()?.to_json()["costTotal"],
            json!(0.1 + 0.2 + 0.5 + 0.25)
        );
        Ok(())
    }

    fn path_runs_root_first_and_handles_null_and_unknown(h) {
        let mut s = h.fresh();
        chain(&mut s);
        assert!(s.path_to_root_or_compaction(None)?.is_empty());
        assert_eq!(
            ids(&s.path_to_root_or_compaction(Some("c"))?),
            ["a", "b", "c"]
        );
        assert_eq!(ids(&s.path_to_root_or_compaction(Some("b"))?), ["a", "b"]);
        let err = s
            .path_to_root_or_compaction(Some("zz"))
            .expect_err("unknown start");
        assert_eq!(err.code(), ErrorCode::NotFound);
        assert_eq!(err.to_string(), "Entry zz not found");
        Ok(())
    }

    fn path_treats_empty_parent_as_root_and_crosses_leaf_entries(h) {
        let mut s = h.fresh();
        append_all(
            &mut s,
            &[
                entry(
                    json!({"type":"message","id":"r","parentId":"","timestamp":"t","message":{"role":"user","content":"x"}}),
                ),
                message("m", Some("r"), "assistant", "y"),
            ],
        );
        s.append_entry(entry(
            json!({"type":"leaf","id":"lf","parentId":"m","timestamp":"t","targetId":"r"}),
        ))?;
        append_all(
            &mut s,
            &[message(
                "after",
                Some("lf"),
                "user",
                "child of a leaf entry",
            )],
        );
        assert_eq!(
            ids(&s.path_to_root_or_compaction(Some("after"))?),
            ["r", "m", "lf", "after"]
        );
        let s = h.reopen(s);
        assert_eq!(
            ids(&s.path_to_root_or_compaction(Some("after"))?),
            ["r", "m", "lf", "after"]
        );
        Ok(())
    }

    fn path_through_a_missing_parent_is_invalid_session(h) {
        let mut s = h.fresh();
        append_all(
            &mut s,
            &[
                message("x", Some("gone"), "user", "orphan"),
                message("y", Some("x"), "assistant", "z"),
            ],
        );
        let err = s
            .path_to_root_or_compaction(Some("y"))
            .expect_err("dangling parent");
        assert_eq!(err.code(), ErrorCode::InvalidSession);
        assert_eq!(err.to_string(), "Entry gone not found");
        // A compaction that stops the walk before the gap makes the path readable.
        s.append_entry(entry(json!({"type":"compaction","id":"k","parentId":"y","timestamp":"t","summary":"s","tokensBefore":1,"firstKeptEntryId":"x"})))?;
        assert_eq!(
            ids(&s.path_to_root_or_compaction(Some("k"))?),
            ["x", "y", "k"]
        );
        let s = h.reopen(s);
        assert_eq!(
            ids(&s.path_to_root_or_compaction(Some("k"))?),
            ["x", "y", "k"]
        );
        Ok(())
    }

    fn path_stops_at_first_kept_entry_of_nearest_compaction(h) {
        let mut s = h.fresh();
        messages(&mut s, 1, 4, None);
        s.append_entry(compaction("c1", "m4", Some("m3"), false))?;
        messages(&mut s, 5, 6, Some("c1"));
        assert_eq!(
            ids(&s.path_to_root_or_compaction(Some("m6"))?),
            ["m3", "m4", "c1", "m5", "m6"]
        );
        // Entries between the start and the compaction are never a stop.
        assert_eq!(
            ids(&s.path_to_root_or_compaction(Some("m4"))?),
            ["m1", "m2", "m3", "m4"]
        );
        // The compaction itself as the start.
        assert_eq!(
            ids(&s.path_to_root_or_compaction(Some("c1"))?),
            ["m3", "m4", "c1"]
        );
        Ok(())
    }

    fn path_stops_at_a_compaction_with_retained_tail(h) {
        let mut s = h.fresh();
        messages(&mut s, 1, 3, None);
        s.append_entry(compaction("c1", "m3", Some("m1"), true))?;
        messages(&mut s, 4, 5, Some("c1"));
        assert_eq!(
            ids(&s.path_to_root_or_compaction(Some("m5"))?),
            ["c1", "m4", "m5"]
        );
        Ok(())
    }

    fn later_compaction_overrides_an_earlier_pending_stop(h) {
        let mut s = h.fresh();
        messages(&mut s, 1, 3, None);
        s.append_entry(compaction("c1", "m3", Some("m2"), false))?;
        messages(&mut s, 4, 5, Some("c1"));
        // c2 keeps m1, which lies above c1: walking up, c1 overrides that with m2.
        s.append_entry(compaction("c2", "m5", Some("m1"), false))?;
        messages(&mut s, 6, 6, Some("c2"));
        assert_eq!(
            ids(&s.path_to_root_or_compaction(Some("m6"))?),
            ["m2", "m3", "c1", "m4", "m5", "c2", "m6"]
        );
        // c3 without firstKeptEntryId clears the pending stop until c2 sets its own.
        s.append_entry(compaction("c3", "m6", None, false))?;
        assert_eq!(
            ids(&s.path_to_root_or_compaction(Some("c3"))?),
            ["m2", "m3", "c1", "m4", "m5", "c2", "m6", "c3"]
        );
        // A first-kept entry above the next compaction is overridden by it (c3 clears it).
        s.append_entry(compaction("c4", "c3", Some("m6"), false))?;
        assert_eq!(
            ids(&s.path_to_root_or_compaction(Some("c4"))?),
            ["m2", "m3", "c1", "m4", "m5", "c2", "m6", "c3", "c4"]
        );
        // A first-kept entry between two compactions stops the walk there.
        messages(&mut s, 7, 7, Some("c4"));
        s.append_entry(compaction("c6", "m7", Some("m7"), false))?;
        assert_eq!(
            ids(&s.path_to_root_or_compaction(Some("c6"))?),
            ["m7", "c6"]
        );
        // firstKeptEntryId naming a compaction: the pending check comes first.
        s.append_entry(compaction("c5", "c6", Some("c6"), false))?;
        assert_eq!(
            ids(&s.path_to_root_or_compaction(Some("c5"))?),
            ["c6", "c5"]
        );
        let s = h.reopen(s);
        assert_eq!(
            ids(&s.path_to_root_or_compaction(Some("m6"))?),
            ["m2", "m3", "c1", "m4", "m5", "c2", "m6"]
        );
        assert_eq!(
            ids(&s.path_to_root_or_compaction(Some("c5"))?),
            ["c6", "c5"]
        );
        Ok(())
    }

    fn first_kept_entry_off_the_path_never_stops_the_walk(h) {
        let mut s = h.fresh();
        messages(&mut s, 1, 3, None);
        append_all(
            &mut s,
            &[message("side", Some("m1"), "assistant", "other branch")],
        );
        s.append_entry(compaction("c1", "m3", Some("side"), false))?;
        assert_eq!(
            ids(&s.path_to_root_or_compaction(Some("c1"))?),
            ["m1", "m2", "m3", "c1"]
        );
        s.append_entry(compaction("c2", "c1", Some("nowhere"), false))?;
        assert_eq!(
            ids(&s.path_to_root_or_compaction(Some("c2"))?),
            ["m1", "m2", "m3", "c1", "c2"]
        );
        Ok(())
    }

    fn compaction_rules_hold_across_forks(h) {
        let mut s = h.fresh();
        messages(&mut s, 1, 4, None);
        s.append_entry(compaction("c1", "m4", Some("m2"), false))?;
        messages(&mut s, 5, 6, Some("c1"));
        // Fork below c1 and below m2, then compact on the fork.
        append_all(
            &mut s,
            &[
                message("f1", Some("m5"), "user", "fork"),
                message("f2", Some("m3"), "user", "older fork"),
            ],
        );
        s.append_entry(compaction("cf", "f1", Some("m5"), false))?;
        assert_eq!(
            ids(&s.path_to_root_or_compaction(Some("cf"))?),
            ["m5", "f1", "cf"]
        );
        assert_eq!(
            ids(&s.path_to_root_or_compaction(Some("f2"))?),
            ["m1", "m2", "m3", "f2"]
        );
        s.append_entry(compaction("cg", "f2", Some("m1"), false))?;
        assert_eq!(
            ids(&s.path_to_root_or_compaction(Some("cg"))?),
            ["m1", "m2", "m3", "f2", "cg"]
        );
        append_all(
            &mut s,
            &[message("g", Some("c1"), "user", "fork at the compaction")],
        );
        assert_eq!(
            ids(&s.path_to_root_or_compaction(Some("g"))?),
            ["m2", "m3", "m4", "c1", "g"]
        );
        let s = h.reopen(s);
        assert_eq!(
            ids(&s.path_to_root_or_compaction(Some("cf"))?),
            ["m5", "f1", "cf"]
        );
        assert_eq!(
            ids(&s.path_to_root_or_compaction(Some("g"))?),
            ["m2", "m3", "m4", "c1", "g"]
        );
        Ok(())
    }

    fn get_entries_slices_the_log_by_position(h) {
        let mut s = h.fresh();
        messages(&mut s, 1, 5, None);
        assert_eq!(ids(&s.entries(0, None)?), ["m1", "m2", "m3", "m4", "m5"]);
        assert_eq!(ids(&s.entries(2, None)?), ["m3", "m4", "m5"]);
        assert_eq!(ids(&s.entries(1, Some(2))?), ["m2", "m3"]);
        assert_eq!(ids(&s.entries(4, Some(10))?), ["m5"]);
        assert!(s.entries(9, None)?.is_empty());
        assert!(s.entries(0, Some(0))?.is_empty());
        Ok(())
    }

    fn a_visit_of_the_log_ends_where_its_sink_says_stop(h) {
        use std::ops::ControlFlow;
        let mut s = h.fresh();
        messages(&mut s, 1, 5, None);
        let visit = |after: usize, limit: Option<usize>, stop_at: usize| {
            let mut seen: Vec<String> = Vec::new();
            let end = s.visit_entries_until(after, limit, &mut |text| {
                seen.push(Entry::from_json(&text)?.id().to_owned());
                Ok(if seen.len() == stop_at {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                })
            });
            end.map(|end| (seen, end.is_break()))
        };
        // Stopped after two: nothing after the stop reaches the sink.
        assert_eq!(visit(1, None, 2)?, (vec!["m2".to_owned(), "m3".to_owned()], true));
        // The store reads again after a stopped read (its statement ended).
        assert_eq!(visit(3, None, 9)?, (vec!["m4".to_owned(), "m5".to_owned()], false));
        assert_eq!(visit(0, Some(3), 9)?.0, ["m1", "m2", "m3"]);
        assert_eq!(visit(9, None, 1)?, (Vec::new(), false));
        assert_eq!(ids(&s.entries(0, None)?).len(), 5);
        Ok(())
    }

    fn entries_come_back_exactly_as_stored(h) {
        let mut s = h.fresh();
        let text = r#"{"zeta":1.50,"type":"message","id":"x1","parentId":null,"timestamp":"2025-01-01T00:00:00.000Z","message":{"role":"user","content":"\ud83d broken emoji ☃","extra":[1e3,-0.0]},"unknown":{"b":1,"a":2}}"#;
        s.append_entry(Entry::from_json(text)?)?;
        assert_eq!(
            s.entry("x1")?.map(|e| e.json().to_owned()).as_deref(),
            Some(text)
        );
        let s = h.reopen(s);
        assert_eq!(
            s.entry("x1")?.map(|e| e.json().to_owned()).as_deref(),
            Some(text)
        );
        assert_eq!(s.entries(0, None)?[0].json(), text);
        assert_eq!(s.path_to_root_or_compaction(Some("x1"))?[0].json(), text);
        Ok(())
    }

    fn session_layer_builds_entries_as_pi_does(h) {
        let mut session = Session::new(h.fresh());
        let m = session.append_message(&JsonText::parse(r#"{"role":"user","content":"hi"}"#)?)?;
        let js = JsString::new;
        let t = session.append_thinking_level_change(&js("high"))?;
        let mc = session.append_model_change(&js("anthropic"), &js("claude"))?;
        let tools = session.append_active_tools_change(&[js("read"), js("bash")])?;
        let custom = session.append_custom_entry(&js("todo"), Some(&JsonText::parse(r#"{"n":1}"#)?))?;
        let cm = session.append_custom_message_entry(
            &js("note"),
            &JsonText::string("remember"),
            Some(true),
            None,
        )?;
        let name = session.append_session_name("  my\r\n\nsession  ")?;
        let st = session.storage();
        let get = |id: &str| st.entry(id).expect("read").expect("exists");
        assert_eq!(get(&m).parent_id(), None);
        assert_eq!(get(&t).parent_id(), Some(m.as_str()));
        assert!(get(&m).json().starts_with(&format!(
            r#"{{"type":"message","id":"{m}","parentId":null,"timestamp":""#
        )));
        assert!(get(&m)
            .json()
            .ends_with(r#","message":{"role":"user","content":"hi"}}"#));
        assert!(get(&t).json().ends_with(r#","thinkingLevel":"high"}"#));
        assert!(get(&mc)
            .json()
            .ends_with(r#","provider":"anthropic","modelId":"claude"}"#));
        assert!(get(&tools)
            .json()
            .ends_with(r#","activeToolNames":["read","bash"]}"#));
        assert!(get(&custom)
            .json()
            .ends_with(r#","customType":"todo","data":{"n":1}}"#));
        assert!(get(&cm)
            .json()
            .ends_with(r#","customType":"note","content":"remember","display":true}"#));
        assert!(get(&name).json().ends_with(r#","name":"my session"}"#));
        assert_eq!(
            st.session_name()?.map(|s| s.to_string_lossy()).as_deref(),
            Some("my session")
        );
        let ts = get(&m).timestamp().to_owned();
        assert_eq!(ts.len(), 24, "ISO-8601 with milliseconds: {ts}");
        assert!(ts.ends_with('Z'));
        Ok(())
    }

    fn labels_need_an_existing_target(h) {
        let mut session = Session::new(h.fresh());
        let m = session.append_message(&JsonText::parse(r#"{"role":"user","content":"hi"}"#)?)?;
        let err = session
            .append_label("ghost", Some("x"))
            .expect_err("unknown target");
        assert_eq!(err.code(), ErrorCode::NotFound);
        assert_eq!(session.storage().entry_count()?, 1);
        let l = session.append_label(&m, Some(" star "))?;
        assert_eq!(
            session
                .storage()
                .label(&m)?
                .map(|s| s.to_string_lossy())
                .as_deref(),
            Some("star")
        );
        assert!(session
            .storage()
            .entry(&l)?
            .expect("label")
            .json()
            .ends_with(&format!(r#","targetId":"{m}","label":" star "}}"#)));
        session.append_label(&m, None)?;
        assert_eq!(session.storage().label(&m)?, None);
        Ok(())
    }

    fn move_to_with_summary_appends_a_child_of_the_target(h) {
        let mut session = Session::new(h.fresh());
        let a = session.append_message(&JsonText::parse(r#"{"role":"user","content":"a"}"#)?)?;
        let _b = session.append_message(&JsonText::parse(r#"{"role":"assistant","content":"b"}"#)?)?;
        assert_eq!(session.move_to(Some(&a), None)?, None);
        assert_eq!(session.storage().leaf_id()?.as_deref(), Some(a.as_str()));
        let summary = BranchSummary {
            summary: Some(JsonText::string("left b")),
            ..BranchSummary::default()
        };
        let sid = session
            .move_to(Some(&a), Some(&summary))?
            .expect("summary id");
        let e = session.storage().entry(&sid)?.expect("summary entry");
        assert_eq!(e.parent_id(), Some(a.as_str()));
        assert!(e
            .json()
            .ends_with(&format!(r#","fromId":"{a}","summary":"left b"}}"#)));
        assert_eq!(session.storage().leaf_id()?.as_deref(), Some(sid.as_str()));
        let root = session
            .move_to(
                None,
                Some(&BranchSummary {
                    summary: Some(JsonText::string("")),
                    ..BranchSummary::default()
                }),
            )?
            .expect("id");
        let e = session.storage().entry(&root)?.expect("root summary");
        assert_eq!(e.parent_id(), None);
        assert!(e.json().contains(r#""fromId":"root""#));
        let err = session.move_to(Some("ghost"), None).expect_err("unknown");
        assert_eq!(err.code(), ErrorCode::NotFound);
        Ok(())
    }

    fn context_applies_state_compaction_and_projections(h) {
        let mut s = h.fresh();
        append_all(
            &mut s,
            &[
                message("u1", None, "user", "first"),
                entry(
                    json!({"type":"thinking_level_change","id":"t1","parentId":"u1","timestamp":"t","thinkingLevel":"high"}),
                ),
                entry(
                    json!({"type":"message","id":"a1","parentId":"t1","timestamp":"t","message":{"role":"assistant","provider":"openai","model":"gpt","content":"x"}}),
                ),
                message("u2", Some("a1"), "user", "second"),
                entry(
                    json!({"type":"compaction","id":"c1","parentId":"u2","timestamp":"2025-01-01T00:00:01.000Z","summary":"S","tokensBefore":42,"firstKeptEntryId":"u2"}),
                ),
                entry(
                    json!({"type":"model_change","id":"mc","parentId":"c1","timestamp":"t","provider":"anthropic","modelId":"claude"}),
                ),
                entry(
                    json!({"type":"active_tools_change","id":"tc","parentId":"mc","timestamp":"t","activeToolNames":["read"]}),
                ),
                entry(
                    json!({"type":"custom_message","id":"cm","parentId":"tc","timestamp":"2025-01-01T00:00:02.000Z","customType":"note","content":"hello","display":false}),
                ),
                entry(
                    json!({"type":"branch_summary","id":"bs0","parentId":"cm","timestamp":"t","fromId":"x","summary":""}),
                ),
                entry(
                    json!({"type":"branch_summary","id":"bs","parentId":"bs0","timestamp":"bad time","fromId":"x","summary":"went elsewhere"}),
                ),
                entry(
                    json!({"type":"custom","id":"cu","parentId":"bs","timestamp":"t","customType":"todo","data":{"n":3}}),
                ),
                entry(
                    json!({"type":"custom","id":"cu2","parentId":"cu","timestamp":"t","customType":"unprojected"}),
                ),
            ],
        );
        let mut options = ContextOptions::default();
        let projector: EntryProjector = Box::new(|e: &Entry, index: usize, all: &[Entry]| {
            vec![
                json!({"role": "user", "content": format!("todo {} at {index} of {}", e.value()["data"]["n"], all.len())}),
            ]
        });
        options.entry_projectors.insert("todo".into(), projector);
        let session = Session::with_options(s, options);
        let ctx: Value = serde_json::from_str(&session.build_context(None)?.to_json_text())?;
        // State comes from the path, which the compaction cut below the thinking change.
        assert_eq!(ctx["thinkingLevel"], json!("off"));
        assert_eq!(
            ctx["model"],
            json!({"provider": "anthropic", "modelId": "claude"})
        );
        assert_eq!(ctx["activeToolNames"], json!(["read"]));
        let msgs = ctx["messages"].as_array().expect("messages");
        assert_eq!(
            msgs[0],
            json!({"role":"compactionSummary","summary":"S","tokensBefore":42,"timestamp":1_735_689_601_000_i64})
        );
        assert_eq!(msgs[1], json!({"role":"user","content":"second"}));
        assert_eq!(
            msgs[2],
            json!({"role":"custom","customType":"note","content":"hello","display":false,"timestamp":1_735_689_602_000_i64})
        );
        assert_eq!(
            msgs[3],
            json!({"role":"branchSummary","summary":"went elsewhere","fromId":"x","timestamp":null})
        );
        assert_eq!(msgs[4], json!({"role":"user","content":"todo 3 at 7 of 9"}));
        assert_eq!(msgs.len(), 5);
        // Transforms run after the default one, in order.
        let mut options = ContextOptions::default();
        let drop_custom: EntryTransform = Box::new(|es: Vec<Entry>| {
            es.into_iter()
                .filter(|e| e.entry_type().as_str() != "custom_message")
                .collect()
        });
        options.entry_transforms.push(drop_custom);
        let session = Session::with_options(session.into_storage(), options);
        let ctx: Value = serde_json::from_str(&session.build_context(None)?.to_json_text())?;
        assert_eq!(ctx["messages"].as_array().map(Vec::len), Some(3));
        // From an earlier entry: state only from that path, no compaction.
        let ctx: Value = serde_json::from_str(&session.build_context(Some("a1"))?.to_json_text())?;
        assert_eq!(
            ctx["model"],
            json!({"provider": "openai", "modelId": "gpt"})
        );
        assert_eq!(ctx["activeToolNames"], Value::Null);
        assert_eq!(ctx["messages"].as_array().map(Vec::len), Some(2));
        Ok(())
    }

    fn context_with_retained_tail_keeps_only_the_tail(h) {
        let mut s = h.fresh();
        messages(&mut s, 1, 3, None);
        s.append_entry(compaction("c1", "m3", Some("m2"), true))?;
        messages(&mut s, 4, 4, Some("c1"));
        let session = Session::new(s);
        let ctx: Value = serde_json::from_str(&session.build_context(None)?.to_json_text())?;
        let msgs = ctx["messages"].as_array().expect("messages");
        assert_eq!(msgs.len(), 3);
        assert_eq!(msgs[0]["role"], json!("compactionSummary"));
        assert_eq!(msgs[1], json!({"role":"user","content":"kept"}));
        assert_eq!(msgs[2]["content"], json!("m4"));
        Ok(())
    }

    fn fork_selection_follows_position_rules(h) {
        let mut s = h.fresh();
        messages(&mut s, 1, 4, None);
        s.set_leaf_id(Some("m2"))?;
        assert_eq!(
            ids(&entries_to_fork(&s, Some("m3"), ForkPosition::Before)?),
            ["m1", "m2"]
        );
        assert!(entries_to_fork(&s, Some("m1"), ForkPosition::Before)?.is_empty());
        assert_eq!(
            ids(&entries_to_fork(&s, Some("m2"), ForkPosition::At)?),
            ["m1", "m2"]
        );
        assert_eq!(
            entries_to_fork(&s, None, ForkPosition::Before)?.len(),
            5,
            "the whole log, leaf entries too"
        );
        assert_eq!(entries_to_fork(&s, Some(""), ForkPosition::At)?.len(), 5);
        let err = entries_to_fork(&s, Some("m2"), ForkPosition::Before).expect_err("assistant target");
        assert_eq!(err.code(), ErrorCode::InvalidForkTarget);
        assert_eq!(err.to_string(), "Entry m2 is not a user message");
        let err = entries_to_fork(&s, Some("ghost"), ForkPosition::At).expect_err("unknown target");
        assert_eq!(err.code(), ErrorCode::InvalidForkTarget);
        assert_eq!(err.to_string(), "Entry ghost not found");
        Ok(())
    }

    fn parent_cycles_are_reported_not_followed_forever(h) {
        let mut s = h.fresh();
        append_all(&mut s, &[message("p", Some("q"), "user", "x")]);
        let second = s.append_entry(message("q", Some("p"), "user", "y"));
        if H::REFUSES_DUPLICATE_IDS {
            // SQLite refuses the entry that would close the loop: it would re-parent `p`.
            assert_eq!(second.expect_err("refused").code(), ErrorCode::InvalidEntry);
            assert_eq!(
                s.path_to_root_or_compaction(Some("p"))
                    .expect_err("dangling")
                    .code(),
                ErrorCode::InvalidSession
            );
        } else {
            second?;
            let err = s.path_to_root_or_compaction(Some("q")).expect_err("cycle");
            assert_eq!(err.code(), ErrorCode::InvalidSession);
        }
        Ok(())
    }

    /// An entry that names itself as parent is the same cycle error on every
    /// backend, from it and from its children, before and after a reopen.
    fn a_self_parent_is_a_cycle_everywhere(h) {
        let mut s = h.fresh();
        append_all(
            &mut s,
            &[
                message("r", None, "user", "root"),
                message("a", Some("a"), "assistant", "self"),
                message("b", Some("a"), "user", "child"),
            ],
        );
        let s = h.reopen(s);
        for from in ["a", "b"] {
            let err = s
                .path_to_root_or_compaction(Some(from))
                .expect_err("a cycle");
            assert_eq!(err.code(), ErrorCode::InvalidSession);
            assert_eq!(
                err.to_string(),
                "Entry a is its own ancestor: the parentId chain has a cycle"
            );
        }
        assert_eq!(ids(&s.path_to_root_or_compaction(Some("r"))?), ["r"]);
        Ok(())
    }

    fn message_without_message_is_an_error_not_a_crash(h) {
        let mut s = h.fresh();
        s.append_entry(entry(
            json!({"type":"message","id":"bad","parentId":null,"timestamp":"t"}),
        ))?;
        assert_eq!(
            s.session_stats().expect_err("stats").code(),
            ErrorCode::InvalidSession
        );
        let session = Session::new(s);
        assert!(session.build_context(None).is_err());
        assert_eq!(session.branch(None)?.len(), 1);
        Ok(())
    }

    fn writes_survive_reopen_with_identical_answers(h) {
        let mut session = Session::new(h.fresh());
        let a = session.append_message(&JsonText::parse(r#"{"role":"user","content":"a"}"#)?)?;
        let b = session.append_message(&JsonText::parse(r#"{"role":"assistant","content":"b","provider":"p","model":"m","usage":{"input":1,"output":2,"cacheRead":3,"cacheWrite":4,"cost":{"total":0.01}}}"#)?)?;
        session.append_label(&b, Some("good"))?;
        session.move_to(
            Some(&a),
            Some(&BranchSummary {
                summary: Some(JsonText::string("back")),
                ..BranchSummary::default()
            }),
        )?;
        session.append_compaction(&Compaction {
            summary: JsonText::string("c"),
            first_kept_entry_id: Some(JsonText::string(&a)),
            tokens_before: JsonText::parse("7")?,
            details: None,
            from_hook: None,
            usage: None,
            retained_tail: None,
        })?;
        session.append_session_name("n")?;
        let before = snapshot(session.storage())?;
        let s = h.reopen(session.into_storage());
        assert_eq!(snapshot(&s)?, before);
        Ok(())
    }

    /// pi's costs have 17 significant digits; they must be read correctly rounded
    /// and summed in log order, as JavaScript does (issue: serde_json's default
    /// parser read `0.011844299999999999` as `0.0118443`).
    fn stats_sum_seventeen_digit_costs_exactly(h) {
        let costs = [
            "0.011844299999999999",
            "0.026755499999999998",
            "0.037346700000000004",
            "0.0029907",
            "5e-324",
            "0.1",
        ];
        let mut s = h.fresh();
        let mut parent: Option<String> = None;
        let mut expected = 0.0_f64;
        for (i, c) in costs.iter().enumerate() {
            let id = format!("a{i}");
            let text = format!(
                r#"{{"type":"message","id":"{id}","parentId":{},"timestamp":"2025-01-01T00:00:00.000Z","message":{{"role":"assistant","content":[],"usage":{{"input":1,"output":2,"cacheRead":0,"cacheWrite":0,"cost":{{"total":{c}}}}}}}}}"#,
                parent
                    .as_ref()
                    .map_or("null".to_owned(), |p| format!("{p:?}"))
            );
            s.append_entry(Entry::from_json(&text)?)?;
            expected += c.parse::<f64>().expect("a Rust float literal");
            parent = Some(id);
        }
        assert_eq!(s.session_stats()?.cost_total.to_bits(), expected.to_bits());
        let s = h.reopen(s);
        assert_eq!(s.session_stats()?.cost_total.to_bits(), expected.to_bits());
        Ok(())
    }

    /// Labels and names keep lone UTF-16 surrogates (pi returns them as stored),
    /// trimmed by JavaScript's rule, across a reopen.
    fn labels_and_names_keep_lone_surrogates(h) {
        let mut s = h.fresh();
        s.append_entry(Entry::from_json(
            r#"{"type":"message","id":"m","parentId":null,"timestamp":"t","message":{"role":"user","content":"x"}}"#,
        )?)?;
        s.append_entry(Entry::from_json(
            r#"{"type":"label","id":"l","parentId":"m","timestamp":"t","targetId":"m","label":" label \udbff "}"#,
        )?)?;
        s.append_entry(Entry::from_json(
            r#"{"type":"session_info","id":"n","parentId":"l","timestamp":"t","name":"\ud800 name\u3000"}"#,
        )?)?;
        let check = |s: &H::S| -> R {
            assert_eq!(
                s.label("m")?.map(|l| l.json().to_owned()).as_deref(),
                Some(r#""label \udbff""#)
            );
            assert_eq!(
                s.session_name()?.map(|n| n.json().to_owned()).as_deref(),
                Some(r#""\ud800 name""#)
            );
            Ok(())
        };
        check(&s)?;
        let mut session = Session::new(h.reopen(s));
        check(session.storage())?;
        // The session layer writes such strings back exactly.
        let lone = JsString::from_json_literal(r#""\udfff x""#).expect("a literal");
        session.append_js_label("m", Some(&lone))?;
        session.append_js_session_name(&lone)?;
        assert_eq!(session.storage().label("m")?, Some(lone.clone()));
        assert_eq!(session.storage().session_name()?, Some(lone));
        Ok(())
    }

    fn leaf_moves_are_the_navigation_history_newest_first(h) {
        let mut s = h.fresh();
        assert!(s.leaf_moves(10)?.is_empty());
        chain(&mut s);
        s.set_leaf_id(Some("a"))?;
        s.append_entry(message("d", Some("a"), "assistant", "again"))?;
        s.set_leaf_id(Some("c"))?;
        s.set_leaf_id(None)?;
        let moves = s.leaf_moves(10)?;
        let hops: Vec<(Option<&str>, Option<&str>)> = moves
            .iter()
            .map(|m| (m.from.as_deref(), m.to.as_deref()))
            .collect();
        // Each move starts where the one before left the leaf (or where appends took it).
        assert_eq!(
            hops,
            vec![
                (Some("c"), None),
                (Some("d"), Some("c")),
                (Some("c"), Some("a"))
            ]
        );
        let leaves = s.find_entries("leaf")?;
        assert_eq!(moves[2].id, leaves[0].id());
        assert_eq!(moves[0].timestamp, leaves[2].facts().timestamp);
        assert_eq!(s.leaf_moves(1)?, moves[..1].to_vec());
        assert!(s.leaf_moves(0)?.is_empty());
        let s = h.reopen(s);
        assert_eq!(s.leaf_moves(10)?, moves);
        Ok(())
    }

    fn append_message_needs_an_object(h) {
        let mut session = Session::new(h.fresh());
        session.append_message(&JsonText::parse(r#"{"role":"user","content":"hi"}"#)?)?;
        for bad in ["null", "5", r#""text""#, "[]", "true"] {
            let err = session
                .append_message(&JsonText::parse(bad)?)
                .expect_err(bad);
            assert_eq!(err.code(), ErrorCode::InvalidEntry, "{bad}: {err}");
            assert!(err.to_string().contains("must be a JSON object"), "{err}");
        }
        // An object without a role is pi's to judge: stored, and reads still work.
        session.append_message(&JsonText::parse(r#"{"content":"no role"}"#)?)?;
        assert_eq!(
            session.storage().entry_count()?,
            2,
            "nothing else was written"
        );
        assert_eq!(session.storage().session_stats()?.message_count, 2);
        assert_eq!(session.build_context(None)?.messages.len(), 2);
        Ok(())
    }

    fn a_session_holding_an_sdk_only_entry_follows_the_sdk_and_keeps_no_lines(h) {
        let mut s = h.fresh();
        chain(&mut s);
        assert!(s.kept_lines()?.is_empty(), "nothing kept without an import");
        s.append_entry(entry(
            json!({"type":"leaf","id":"l1","parentId":"c","timestamp":"t","targetId":"a"}),
        ))?;
        assert_eq!(s.contract()?, sessiontree::Contract::Sdk);
        let s = h.reopen(s);
        assert_eq!(s.contract()?, sessiontree::Contract::Sdk);
        Ok(())
    }
}
