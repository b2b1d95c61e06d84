//! The conformance suite: every rule of the session contract, run against
//! every backend. A backend joins with one `conformance!` line; a rule is one
//! function in `cases.rs` plus its name in the list below.

mod cases;
mod harness;

macro_rules! conformance {
    ($backend:ident, $make:expr) => {
        conformance!(@cases $backend, $make,
            empty_session_has_no_leaf_entries_or_stats,
            append_moves_leaf_to_entry_and_leaf_entry_to_target,
            set_leaf_appends_a_leaf_entry_with_previous_leaf_as_parent,
            set_leaf_to_unknown_entry_is_not_found_and_writes_nothing,
            leaf_naming_a_missing_entry_is_invalid_session,
            created_entry_ids_are_short_and_unused,
            duplicate_ids_shadow_in_pi_or_are_refused,
            find_entries_returns_one_type_in_log_order,
            labels_are_trimmed_replaced_and_cleared,
            session_name_is_the_last_session_info_trimmed,
            stats_sum_complete_usage_over_every_branch,
            path_runs_root_first_and_handles_null_and_unknown,
            path_treats_empty_parent_as_root_and_crosses_leaf_entries,
            path_through_a_missing_parent_is_invalid_session,
            path_stops_at_first_kept_entry_of_nearest_compaction,
            path_stops_at_a_compaction_with_retained_tail,
            later_compaction_overrides_an_earlier_pending_stop,
            first_kept_entry_off_the_path_never_stops_the_walk,
            compaction_rules_hold_across_forks,
            get_entries_slices_the_log_by_position,
            entries_come_back_exactly_as_stored,
            session_layer_builds_entries_as_pi_does,
            labels_need_an_existing_target,
            move_to_with_summary_appends_a_child_of_the_target,
            context_applies_state_compaction_and_projections,
            context_with_retained_tail_keeps_only_the_tail,
            fork_selection_follows_position_rules,
            parent_cycles_are_reported_not_followed_forever,
            message_without_message_is_an_error_not_a_crash,
            writes_survive_reopen_with_identical_answers,
            stats_sum_seventeen_digit_costs_exactly,
            labels_and_names_keep_lone_surrogates,
            leaf_moves_are_the_navigation_history_newest_first,
            append_message_needs_an_object,
        );
    };
    (@cases $backend:ident, $make:expr, $($case:ident),+ $(,)?) => {
        mod $backend {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[test]
                fn $case() -> Result<(), Box<dyn std::error::Error>> {
                    let mut h = $make;
                    super::cases::$case(&mut h)
                }
            )+
        }
    };
}

conformance!(memory, harness::Memory);
conformance!(jsonl, harness::Jsonl::new());
conformance!(sqlite, harness::Sqlite::new());
