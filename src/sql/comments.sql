-- What \df+, \dv+, \dt+ and \dT+ show for each object of the extension; the
-- reference is docs/sql-reference.md (sql/18_comments.sql checks that no
-- function, view, table or type is without one).  Part of the install script
-- and of every update script.

COMMENT ON FUNCTION streamguard.create_stream(text, integer, interval, interval, interval) IS
	'Creates a stream: a partitioned, ordered, retained log of jsonb events.';
COMMENT ON FUNCTION streamguard.set_payload_check(text, text) IS
	'Makes a stream take only JSON objects as payloads (''object'') or any JSON value (''any'', the default).';
COMMENT ON FUNCTION streamguard.alter_stream(text, integer, interval, interval, interval) IS
	'Changes a stream''s partition count (more only), retention, dedup window or segment interval.';
COMMENT ON FUNCTION streamguard.drop_stream(text, boolean) IS
	'Drops a stream and its events; force => true also drops its pipelines, consumers and captures.';
COMMENT ON FUNCTION streamguard.append(text, jsonb, text, text, integer) IS
	'Appends one event in the caller''s transaction; returns its partition and seq.';
COMMENT ON FUNCTION streamguard.append_batch(text, jsonb[], text[], text[], integer[]) IS
	'Appends many events in the caller''s transaction; returns each one''s partition and seq.';
COMMENT ON FUNCTION streamguard.poll(text, text, integer, interval, text) IS
	'Reads a consumer''s next events and moves its position in the caller''s transaction.';
COMMENT ON FUNCTION streamguard.read(text, integer, bigint, integer) IS
	'Reads a partition''s events after a seq, below the readable horizon, moving no position.';
COMMENT ON FUNCTION streamguard.seek(text, text, integer, bigint) IS
	'Sets a consumer''s position in one partition to a seq.';
COMMENT ON FUNCTION streamguard.seek(text, text, timestamp with time zone) IS
	'Sets a consumer''s positions to the first events appended at or after a time.';
COMMENT ON FUNCTION streamguard.seq_at_time(text, integer, timestamp with time zone) IS
	'The first seq of a partition appended at or after a time.';
COMMENT ON FUNCTION streamguard.drop_consumer(text, text) IS
	'Drops a consumer of a stream and its positions.';
COMMENT ON FUNCTION streamguard.leave_group(text, text, text) IS
	'Removes a member from a consumer group; its partitions go to the other members.';
COMMENT ON FUNCTION streamguard.grant_stream(text, regrole, text) IS
	'Lets a role append to or read a stream (privilege ''append'', ''read'' or ''all'').';
COMMENT ON FUNCTION streamguard.revoke_stream(text, regrole, text) IS
	'Takes back a privilege on a stream given by grant_stream.';
COMMENT ON FUNCTION streamguard.create_pipeline(text, text, text, text, integer, text, boolean, interval, text, text, text, text, text, interval, boolean, integer, interval, interval, integer, text[]) IS
	'Creates a pipeline: SQL run per batch of a stream (or topic) by background workers, exactly once by default.';
COMMENT ON FUNCTION streamguard.create_window_pipeline(text, text, text, interval, jsonb, text, interval, text, text, text, interval, interval, text, integer, text, text, text, interval) IS
	'Creates a pipeline that aggregates a stream into tumbling, hopping or session windows.';
COMMENT ON FUNCTION streamguard.alter_pipeline(text, text, integer, text, interval, integer, interval, interval, integer) IS
	'Changes a pipeline''s SQL, batch size, error policy, timeouts, retries or workers.';
COMMENT ON FUNCTION streamguard.pause_pipeline(text) IS
	'Stops a pipeline''s workers after their current batch; resume_pipeline starts them again.';
COMMENT ON FUNCTION streamguard.resume_pipeline(text) IS
	'Starts a paused or failed pipeline again from its committed positions.';
COMMENT ON FUNCTION streamguard.reset_pipeline(text, bigint, timestamp with time zone, integer) IS
	'Moves a pipeline''s positions to a seq, a time or the start of its source.';
COMMENT ON FUNCTION streamguard.drop_pipeline(text) IS
	'Drops a pipeline, settling its in-doubt remote transactions first.';
COMMENT ON FUNCTION streamguard.skip_event(text, integer, bigint) IS
	'Makes a pipeline pass over one event (counted as skipped) the next time it reaches it.';
COMMENT ON FUNCTION streamguard.redrive_dead_letters(text, integer, bigint, bigint, text) IS
	'Runs a pipeline''s SQL again over its dead letters and removes those that succeed.';
COMMENT ON FUNCTION streamguard.purge_dead_letters(text, interval) IS
	'Deletes a pipeline''s dead letters, or those older than an age.';
COMMENT ON FUNCTION streamguard.capture_table(regclass, text, text[], text[], text[], boolean) IS
	'Appends every committed change of a table to a stream in the writer''s transaction, with a backfill.';
COMMENT ON FUNCTION streamguard.uncapture_table(regclass, text) IS
	'Stops capturing a table''s changes into a stream.';
COMMENT ON FUNCTION streamguard.run_backfill_chunk(regclass, text, integer) IS
	'Runs one chunk of a capture''s backfill in the caller''s transaction.';
COMMENT ON FUNCTION streamguard.metrics() IS
	'Every streamguard metric in the Prometheus text format.';
COMMENT ON FUNCTION streamguard.inject_fault(text, text, text, integer) IS
	'Test only: arms a fault point (a kill, an error or a delay) in a pipeline''s worker.';
COMMENT ON FUNCTION streamguard.remote_validator(text[], oid) IS
	'Option validator of the streamguard_remote foreign-data wrapper.';
COMMENT ON FUNCTION streamguard.kafka_validator(text[], oid) IS
	'Option validator of the streamguard_kafka foreign-data wrapper.';
COMMENT ON FUNCTION streamguard._can_watch(integer) IS
	'Internal: whether the current role may see a stream''s consumers (owner, member of the owner, read or watch grant, pg_read_all_stats).';
COMMENT ON FUNCTION streamguard._is_member(oid) IS
	'Internal: whether the current role may act as a role; false for a role that is gone.';
COMMENT ON FUNCTION streamguard._capture_trigger() IS
	'Internal: the trigger of a captured table, appending its changes.';
COMMENT ON FUNCTION streamguard._capture_ddl_end() IS
	'Internal: event trigger that follows DDL on captured tables.';
COMMENT ON FUNCTION streamguard._capture_sql_drop() IS
	'Internal: event trigger that follows drops of captured tables.';
COMMENT ON FUNCTION streamguard._capture_table_rewrite() IS
	'Internal: event trigger that follows rewrites of captured tables.';
COMMENT ON FUNCTION streamguard._group_members() IS
	'Internal: the consumer group members in shared memory, for the consumer_group_members view.';
COMMENT ON FUNCTION streamguard._next_event_time(integer, integer, bigint) IS
	'Internal: the append time of a partition''s next event after a seq, for the views.';
COMMENT ON FUNCTION streamguard._open_appends() IS
	'Internal: the open transactions holding partitions'' readable horizons back.';
COMMENT ON FUNCTION streamguard._partition_stats() IS
	'Internal: each partition''s counters in shared memory, for the stream views.';
COMMENT ON FUNCTION streamguard._pipeline_batches() IS
	'Internal: the checkpoint log of the caller''s pipelines, for the pipeline_batches view.';
COMMENT ON FUNCTION streamguard._pipeline_histogram() IS
	'Internal: batch duration histograms of the pipelines, for pipeline_batch_durations.';
COMMENT ON FUNCTION streamguard._pipeline_runtime() IS
	'Internal: the pipeline workers'' state in shared memory, for the pipeline views.';
COMMENT ON FUNCTION streamguard._remote_runtime() IS
	'Internal: the caller''s pipelines'' remote connections and errors, for remote_status.';
COMMENT ON FUNCTION streamguard._window_pipeline_guard() IS
	'Internal: trigger that keeps a window pipeline''s generated SQL and single worker.';
COMMENT ON FUNCTION streamguard._window_time(timestamp with time zone) IS
	'Internal: an event''s window time, checked, in a window pipeline''s generated SQL.';
COMMENT ON FUNCTION streamguard._worker_slots() IS
	'Internal: background worker slots in use against the caps, for the worker_slots view.';

COMMENT ON VIEW streamguard.streams IS
	'One row per stream: partitions, retention, dedup window, events, size and owner.';
COMMENT ON VIEW streamguard.stream_partitions IS
	'One row per partition of a stream: next seq, readable horizon, retained events.';
COMMENT ON VIEW streamguard.stream_repartitions IS
	'Changes of a stream''s partition count, and the readers not yet past them.';
COMMENT ON VIEW streamguard.consumers IS
	'One row per consumer and partition: position, lag and last commit.';
COMMENT ON VIEW streamguard.consumer_group_members IS
	'The members of consumer groups, their partitions and leases.';
COMMENT ON VIEW streamguard.horizon_holders IS
	'Open transactions that hold a partition''s readable horizon back.';
COMMENT ON VIEW streamguard.pipelines IS
	'One row per pipeline: state, worker, counters, lag, last error.';
COMMENT ON VIEW streamguard.pipeline_workers IS
	'One row per worker of a pipeline: its process, partitions, state and counters.';
COMMENT ON VIEW streamguard.pipeline_batches IS
	'The checkpoint log: the last committed batches of each pipeline, with their timings.';
COMMENT ON VIEW streamguard.pipeline_batch_durations IS
	'Histograms of the pipelines'' batch durations.';
COMMENT ON VIEW streamguard.dead_letters IS
	'Events a pipeline with error_policy dead_letter could not process, with their errors.';
COMMENT ON VIEW streamguard.remote_status IS
	'Remote PostgreSQL and Kafka connections of the pipelines: state and last error.';
COMMENT ON VIEW streamguard.captures IS
	'Captured tables: their streams, columns and backfill progress.';
COMMENT ON VIEW streamguard.windows IS
	'The open and recently closed windows of window pipelines.';
COMMENT ON VIEW streamguard.kafka_lag IS
	'Per Kafka-source pipeline and partition: the stored offset, the high watermark and the lag.';
COMMENT ON VIEW streamguard.worker_slots IS
	'Background worker slots used by streamguard, per database and role, against the caps.';

COMMENT ON TABLE streamguard.stream IS 'Internal: one row per stream (read streamguard.streams).';
COMMENT ON TABLE streamguard.stream_partition IS 'Internal: one row per partition of a stream.';
COMMENT ON TABLE streamguard.stream_repartition IS 'Internal: the history of partition count changes.';
COMMENT ON TABLE streamguard.stream_grant IS 'Internal: privileges given by grant_stream.';
COMMENT ON TABLE streamguard.segment IS 'Internal: the segments of each stream (their events are in tables of schema streamguard_data).';
COMMENT ON TABLE streamguard.append_dedup IS 'Internal: append dedup keys within each stream''s dedup window.';
COMMENT ON TABLE streamguard.consumer IS 'Internal: consumer positions, one row per consumer and partition.';
COMMENT ON TABLE streamguard.pipeline IS 'Internal: one row per pipeline (read streamguard.pipelines).';
COMMENT ON TABLE streamguard.pipeline_worker IS 'Internal: each worker of a pipeline and the epoch of its incarnation.';
COMMENT ON TABLE streamguard.pipeline_batch IS 'Internal: the checkpoint log, written in each batch''s transaction.';
COMMENT ON TABLE streamguard.pipeline_dedup IS 'Internal: the dedup keys a pipeline with dedup => true has processed.';
COMMENT ON TABLE streamguard.pipeline_skip IS 'Internal: events skip_event asked a pipeline to pass over.';
COMMENT ON TABLE streamguard.dead_letter IS 'Internal: dead letters (read streamguard.dead_letters).';
COMMENT ON TABLE streamguard.remote_position IS 'Internal: positions of pipelines reading a stream on a remote server.';
COMMENT ON TABLE streamguard.remote_prepared IS 'Internal: prepared transactions a pipeline left on its remote sink, to settle.';
COMMENT ON TABLE streamguard.kafka_position IS 'Internal: the next offset of each partition of a Kafka-source pipeline.';
COMMENT ON TABLE streamguard.capture IS 'Internal: captured tables and their backfill state.';
COMMENT ON TABLE streamguard.capture_claim IS 'Internal: per-key claims that order a captured table''s changes.';
COMMENT ON TABLE streamguard.window_def IS 'Internal: the window definition of each window pipeline.';
COMMENT ON TABLE streamguard.window_state IS 'Internal: the accumulators of open windows.';
COMMENT ON TABLE streamguard.window_partition IS 'Internal: the latest event time seen per partition of a window pipeline.';
COMMENT ON TABLE streamguard.installation IS 'Internal: this installation''s identity (a uuid), one row.';
COMMENT ON TABLE streamguard.pipeline_stats IS 'Internal: each pipeline''s counters and last error, written by its batches.';

COMMENT ON TYPE streamguard.position IS 'An event''s place in its stream: partition and seq.';
COMMENT ON TYPE streamguard.event IS 'An event as poll and read return it, and as a pipeline''s SQL sees it in relation batch.';
COMMENT ON DOMAIN streamguard.object_name IS 'The name of a stream or a pipeline: 1 to 63 ASCII letters, digits, "_" and "-", starting with a letter or "_".';
COMMENT ON DOMAIN streamguard.consumer_name IS 'The name of a consumer: a stream or pipeline name, or a pipeline''s consumer "pipeline:<name>".';
COMMENT ON TYPE streamguard.guarantee IS 'A pipeline''s delivery guarantee.';
COMMENT ON TYPE streamguard.error_policy IS 'What a pipeline does with an event its SQL fails on.';
COMMENT ON TYPE streamguard.pipeline_state IS 'Whether a pipeline runs, was paused, or stopped on an error.';
COMMENT ON TYPE streamguard.sink_mode IS 'How a remote sink commits with the batch: two-phase commit, or offsets stored with the rows.';
COMMENT ON TYPE streamguard.capture_operation IS 'The changes of a captured table that become events.';
COMMENT ON TYPE streamguard.backfill_state IS 'Where a capture''s backfill of the existing rows is.';
COMMENT ON TYPE streamguard.window_kind IS 'A window pipeline''s kind of window.';
COMMENT ON TYPE streamguard.window_emit IS 'When a window pipeline writes a window: once closed, or at every change.';
COMMENT ON TYPE streamguard.window_late IS 'What a window pipeline does with an event whose window has closed.';
COMMENT ON TYPE streamguard.window_agg IS 'The aggregates a window pipeline computes.';
