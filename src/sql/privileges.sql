-- Privileges: every table is the extension's alone, every view PUBLIC may
-- read, and every function is public API, filters by itself, or is revoked
-- (sql/15_trust.sql lists each function with its decision; docs/security.md,
-- "Function privileges").  Part of the install script and of every update
-- script: an update states them again, for the objects it made as for the
-- others.

GRANT USAGE ON SCHEMA streamguard TO PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA streamguard FROM PUBLIC;
GRANT SELECT ON streamguard.streams, streamguard.stream_partitions, streamguard.stream_repartitions,
	streamguard.consumers, streamguard.consumer_group_members, streamguard.horizon_holders,
	streamguard.pipelines, streamguard.pipeline_workers, streamguard.pipeline_batches,
	streamguard.pipeline_batch_durations, streamguard.dead_letters, streamguard.remote_status,
	streamguard.captures, streamguard.windows, streamguard.kafka_lag, streamguard.worker_slots
	TO PUBLIC;

-- A view calls functions with its caller's rights, not its owner's: the
-- internal functions the views call stay executable by PUBLIC and filter by
-- themselves (_next_event_time, _pipeline_batches, _remote_runtime,
-- _group_members) or return only what the views show every role
-- (_partition_stats, _pipeline_runtime, _open_appends, _pipeline_histogram,
-- _is_member, _can_watch, _worker_slots, _window_time).  The others are
-- revoked.
REVOKE EXECUTE ON FUNCTION streamguard.create_stream(text, int, interval, interval, interval) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION streamguard.inject_fault(text, text, text, int) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION streamguard.remote_validator(text[], oid) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION streamguard.kafka_validator(text[], oid) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION streamguard._capture_trigger() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION streamguard._capture_sql_drop() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION streamguard._capture_table_rewrite() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION streamguard._capture_ddl_end() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION streamguard._window_pipeline_guard() FROM PUBLIC;
