//! The conformance suite: every case of `idem_store_tests::cases`, on SQLite and on
//! PostgreSQL (`sqlite::<case>`, `postgres::<case>`). The PostgreSQL tests need
//! `IDEM_TEST_PG_URL`; without it they skip with a notice (and fail under `CI`).

use idem_store_tests::cases::{
    counter::*, effect::*, enqueue_key::*, job_cancel::*, job_claim::*, job_dead::*, job_finish::*,
    job_insert::*, job_lease::*, job_read::*, job_rescue::*, ledger::*, migrate::*, purge::*,
    tx::*,
};

idem_store_tests::store_cases!(
    // counter
    counter_numbers_have_no_gaps_and_repeat_per_key,
    counter_next_refuses_a_stale_claim,
    counter_one_key_numbers_on_two_counters,
    // effect
    effect_claim_commits_with_its_transaction,
    effect_claim_refuses_a_stale_claim,
    effect_others_lists_a_jobs_other_keys,
    // ledger
    ledger_posts_once_and_repair_rebuilds,
    ledger_post_refuses_a_stale_claim,
    // migrate
    migrate_is_idempotent,
    migrate_creates_the_tables,
    migrate_refuses_a_newer_schema,
    // job_insert
    insert_one_stores_the_defaults,
    insert_many_keeps_the_given_order,
    insert_state_follows_run_at,
    insert_round_trips_args,
    insert_round_trips_extreme_values,
    insert_empty_batch_is_a_no_op,
    insert_refuses_invalid_jobs,
    insert_uses_the_database_clock,
    // job_claim
    claim_sets_the_lease,
    claim_respects_the_queue,
    claim_orders_by_priority_run_at_and_id,
    claim_respects_the_limit,
    claim_waits_for_run_at,
    claim_takes_due_retryable_jobs,
    claim_skips_jobs_not_waiting,
    claim_gives_each_job_once,
    claim_skips_jobs_another_claim_holds,
    claim_concurrently_never_duplicates,
    claim_concurrently_across_stores_never_duplicates,
    // job_lease: heartbeat and lock
    heartbeat_extends_only_current_leases,
    heartbeat_of_no_leases_is_a_no_op,
    heartbeat_keeps_the_rescuer_away,
    lock_returns_the_current_claim,
    lock_refuses_a_claim_not_current,
    lock_holds_off_a_concurrent_rescue,
    lock_holds_off_a_rescue_from_another_store,
    lock_holds_off_a_concurrent_cancel,
    lock_sees_a_concurrent_rescue,
    // job_finish: complete and fail
    complete_finishes_the_current_claim,
    complete_refuses_a_stale_fence,
    complete_many_finishes_only_current_claims,
    complete_refuses_a_job_not_running,
    complete_refuses_after_cancel,
    fail_with_a_delay_makes_the_job_retryable,
    fail_without_a_delay_makes_the_job_dead,
    fail_of_the_last_attempt_is_dead,
    fail_refuses_a_claim_not_current,
    // job_rescue
    rescue_moves_expired_leases_back,
    rescue_applies_a_cap_on_attempts,
    rescue_waits_until_the_lease_has_expired,
    rescue_respects_the_limit,
    rescue_fences_out_the_old_claim,
    rescue_ignores_jobs_not_running,
    // job_cancel
    cancel_stops_unfinished_jobs,
    cancel_fences_out_the_running_claim,
    cancel_refuses_finished_jobs,
    cancel_of_a_missing_job_is_not_found,
    cancel_waits_for_a_concurrent_claim,
    // reads
    read_get_of_a_missing_job_is_none,
    read_list_filters_newest_first,
    read_list_pages_with_before_id,
    read_attempts_oldest_first,
    read_first_attempts_are_the_earliest_start_per_job,
    read_queue_counts,
    read_now_is_the_database_clock,
    read_url_reaches_the_same_database,
    read_close_makes_calls_unavailable,
    // tx
    tx_backend_is_reported,
    tx_commit_publishes_writes,
    tx_rollback_discards_writes,
    tx_drop_discards_writes,
    tx_execute_and_query_round_trip,
    tx_sql_values_round_trip_by_dialect,
    tx_unique_violation_is_duplicate,
    tx_job_shares_the_callers_transaction,
    tx_effect_commits_with_the_completion,
    // enqueue_key
    enqueue_key_dedups_inside_the_window,
    enqueue_key_is_free_again_after_the_window,
    enqueue_key_window_runs_from_the_jobs_run_at,
    enqueue_key_twice_in_one_batch_is_one_job,
    enqueue_key_batch_keeps_the_input_order,
    enqueue_key_follows_the_callers_transaction,
    enqueue_key_racing_producer_gets_the_committed_job,
    enqueue_key_racing_producer_takes_a_rolled_back_key,
    enqueue_key_two_producers_at_once_get_one_job,
    enqueue_key_many_producers_get_one_job,
    // job_dead: snooze, retry, discard
    snooze_gives_the_attempt_back,
    snooze_never_makes_the_job_dead,
    snooze_refuses_a_claim_not_current,
    snooze_counts_per_job_and_retry_resets_the_count,
    retry_puts_a_dead_job_back_with_a_fresh_ladder,
    retry_takes_cancelled_jobs,
    retry_leaves_other_jobs_alone,
    discard_deletes_dead_jobs_with_their_history_and_key,
    discard_leaves_jobs_not_dead_alone,
    // purge
    purge_finished_jobs_oldest_first,
    purge_dead_jobs_only,
    purge_effect_keys_created_before_the_cutoff,
    purge_enqueue_keys_created_before_the_cutoff,
    purge_of_a_large_table_runs_in_bounded_batches,
    purge_of_a_job_frees_its_enqueue_key,
    purge_spares_a_dead_job_retried_meanwhile,
    purge_spares_an_enqueue_key_taken_over_meanwhile,
    ledger_repair_counts_a_post_that_commits_while_it_waits,
);

idem_store_tests::postgres_cases!(
    effect_claim_survives_its_holder_purged_meanwhile,
    ledger_post_survives_its_entry_deleted_meanwhile,
);
