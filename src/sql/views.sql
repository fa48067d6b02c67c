-- Every view of the extension.  Part of the install script and of every
-- update script (make builds both from src/sql/): an update states each view
-- again in full, so that a fresh and an updated installation have the same
-- definitions (test/t/095_upgrade.pl), bound to pg_catalog.  A view keeps its
-- columns from one version to the next (CREATE OR REPLACE VIEW: new columns go
-- at the end), so that views and queries of users built on them go on working.
-- The names of streams, pipelines and consumers are of the domains
-- object_name and consumer_name in the catalog, and text in the views.

CREATE OR REPLACE VIEW streamguard.stream_partitions AS
SELECT s.name::text AS stream, p.partition, p.first_seq, p.last_seq,
	   p.readable_horizon, p.next_seq, p.in_flight,
	   sp.seq_floor
FROM streamguard._partition_stats() p
JOIN streamguard.stream s ON s.id = p.stream_id
JOIN streamguard.stream_partition sp ON sp.stream_id = p.stream_id AND sp.partition = p.partition;

CREATE OR REPLACE VIEW streamguard.streams AS
SELECT s.name::text AS stream,
	   s.owner::regrole AS owner,
	   s.partitions,
	   s.retention,
	   s.dedup_window,
	   s.current_seg - s.min_seg + 1 AS segments,
	   coalesce(pg_catalog.sum(p.last_seq - p.first_seq + 1), 0)::bigint AS retained_events,
	   pg_catalog.min(p.first_seq) AS first_seq,
	   pg_catalog.max(p.last_seq) AS last_seq,
	   pg_catalog.min(p.readable_horizon) AS readable_horizon,
	   coalesce(pg_catalog.sum(p.in_flight), 0)::int AS in_flight,
	   coalesce(pg_catalog.max(p.append_rate), 0) AS append_rate,
	   s.created_at,
	   s.payload_check,
	   s.segment_interval
FROM streamguard.stream s
LEFT JOIN streamguard._partition_stats() p ON p.stream_id = s.id
GROUP BY s.id;

-- changes of a stream's partition count and their switch points (alter_stream)
CREATE OR REPLACE VIEW streamguard.stream_repartitions AS
SELECT s.name::text AS stream,
	   r.epoch,
	   r.old_partitions,
	   r.new_partitions,
	   r.switch_seqs,
	   r.changed_at
FROM streamguard.stream_repartition r
JOIN streamguard.stream s ON s.id = r.stream_id;

-- a consumer's positions are shown to the roles that may read its stream
CREATE OR REPLACE VIEW streamguard.consumers WITH (security_barrier) AS
SELECT s.name::text AS stream,
	   c.name::text AS consumer,
	   c.partition,
	   c.position AS committed_seq,
	   p.readable_horizon,
	   greatest(coalesce(p.last_seq, 0) - c.position, 0) AS lag_events,
	   coalesce(extract(epoch FROM pg_catalog.now() - streamguard._next_event_time(c.stream_id, c.partition, c.position)), 0)::float8 AS lag_seconds,
	   c.lost AS lost_events,
	   c.updated_at
FROM streamguard.consumer c
JOIN streamguard.stream s ON s.id = c.stream_id
LEFT JOIN streamguard._partition_stats() p
	   ON p.stream_id = c.stream_id AND p.partition = c.partition
WHERE streamguard._can_watch(c.stream_id);

-- every role sees every pipeline's state and counters; its error text (which
-- can quote the events' values) only the owner, its members and superusers
CREATE OR REPLACE VIEW streamguard.pipelines AS
SELECT p.name::text AS pipeline,
	   coalesce(s.name, p.source_server || ':' || p.remote_stream) AS source,
	   p.sink_server,
	   p.sink_table,
	   p.state::text AS state,
	   p.guarantee::text AS guarantee,
	   p.owner::regrole AS owner,
	   r.worker_pid,
	   p.batch_size,
	   p.error_policy::text AS error_policy,
	   st.batches,
	   st.events_in,
	   st.rows_out,
	   coalesce((SELECT pg_catalog.sum(rw.events_per_sec) FROM streamguard._pipeline_runtime() rw
				 WHERE rw.pipeline_id = p.id), 0) AS events_per_sec,
	   lag.lag_events,
	   lag.lag_seconds,
	   st.last_batch_at,
	   r.last_batch_ms,
	   r.last_fetch_ms,
	   r.last_process_ms,
	   r.last_commit_ms,
	   CASE WHEN streamguard._is_member(p.owner) THEN st.last_error END AS last_error,
	   CASE WHEN streamguard._is_member(p.owner) THEN st.last_error_at END AS last_error_at,
	   p.restarts,
	   st.skipped,
	   st.dead_letters,
	   p.epoch,
	   CASE WHEN p.state = 'running' THEN coalesce(r.worker_status, 'starting') END AS worker_status,
	   p.batch_timeout,
	   p.workers,
	   CASE WHEN p.source_server IS NULL THEN lag.lost_events
			ELSE (SELECT pg_catalog.sum(rp.lost)::bigint FROM streamguard.remote_position rp
				  WHERE rp.pipeline_id = p.id) END AS lost_events
FROM streamguard.pipeline p
LEFT JOIN streamguard.pipeline_stats st ON st.pipeline_id = p.id
LEFT JOIN streamguard.stream s ON s.id = p.stream_id
LEFT JOIN streamguard._pipeline_runtime() r ON r.pipeline_id = p.id AND r.worker = 0
LEFT JOIN LATERAL (
	SELECT pg_catalog.sum(c.lag_events)::bigint AS lag_events, pg_catalog.max(c.lag_seconds) AS lag_seconds,
		   pg_catalog.sum(c.lost_events)::bigint AS lost_events
	FROM streamguard.consumers c
	WHERE c.stream = s.name AND c.consumer = 'pipeline:' || p.name) lag ON true;

-- each worker of each pipeline: the partitions it owns (p % workers =
-- worker), its process, rate, last batch and lag
CREATE OR REPLACE VIEW streamguard.pipeline_workers AS
SELECT p.name::text AS pipeline,
	   w.worker,
	   -- a remote source's partitions are its remote_position rows
	   coalesce((SELECT pg_catalog.array_agg(sp.partition ORDER BY sp.partition) FROM streamguard.stream_partition sp
		WHERE sp.stream_id = p.stream_id AND sp.partition % p.workers = w.worker),
		(SELECT pg_catalog.array_agg(rp.partition ORDER BY rp.partition) FROM streamguard.remote_position rp
		WHERE rp.pipeline_id = p.id AND rp.partition % p.workers = w.worker)) AS partitions,
	   r.worker_pid,
	   pw.epoch,
	   pw.started_at,
	   coalesce(r.events_per_sec, 0) AS events_per_sec,
	   r.last_batch_ms,
	   lag.lag_events,
	   lag.lag_seconds,
	   CASE WHEN p.state = 'running' THEN coalesce(r.worker_status, 'starting') END AS worker_status
FROM streamguard.pipeline p
CROSS JOIN LATERAL pg_catalog.generate_series(0, p.workers - 1) AS w(worker)
LEFT JOIN streamguard.stream s ON s.id = p.stream_id
LEFT JOIN streamguard.pipeline_worker pw ON pw.pipeline_id = p.id AND pw.worker = w.worker
LEFT JOIN streamguard._pipeline_runtime() r ON r.pipeline_id = p.id AND r.worker = w.worker
LEFT JOIN LATERAL (
	SELECT pg_catalog.sum(c.lag_events)::bigint AS lag_events, pg_catalog.max(c.lag_seconds) AS lag_seconds
	FROM streamguard.consumers c
	WHERE c.stream = s.name AND c.consumer = 'pipeline:' || p.name
	  AND c.partition % p.workers = w.worker) lag ON true;

CREATE OR REPLACE VIEW streamguard.remote_status AS
SELECT p.name::text AS pipeline,
	   side.side,
	   side.server,
	   coalesce(r.connected, false) AS connected,
	   r.rtt_ms,
	   CASE WHEN streamguard._is_member(p.owner) THEN r.last_error END AS last_error,
	   (SELECT pg_catalog.count(*) FROM streamguard.remote_prepared rp WHERE rp.pipeline_id = p.id) AS prepared_pending
FROM streamguard.pipeline p
CROSS JOIN LATERAL (VALUES ('source', p.source_server), ('sink', p.sink_server)) AS side(side, server)
-- one row per pipeline and side whatever its workers: connected only if every
-- worker is, the slowest round trip, an error of any
LEFT JOIN (SELECT rr.pipeline_id, rr.side, pg_catalog.bool_and(rr.connected) AS connected,
				  pg_catalog.max(rr.rtt_ms) AS rtt_ms, pg_catalog.max(rr.last_error) AS last_error
		   FROM streamguard._remote_runtime() rr GROUP BY rr.pipeline_id, rr.side) r
	ON r.pipeline_id = p.id AND r.side = side.side
WHERE side.server IS NOT NULL;

-- the checkpoint log: for the pipeline's owner, its members and superusers
CREATE OR REPLACE VIEW streamguard.pipeline_batches WITH (security_barrier) AS
SELECT p.name::text AS pipeline, b.batch_id, b.epoch, b.committed_at, b.events_in, b.rows_out,
	   b.partitions, b.first_seq, b.last_seq, b.fetch_ms, b.process_ms, r.commit_ms
FROM streamguard.pipeline_batch b
JOIN streamguard.pipeline p ON p.id = b.pipeline_id
LEFT JOIN streamguard._pipeline_batches() r
	   ON r.pipeline_id = b.pipeline_id AND r.batch_id = b.batch_id
WHERE streamguard._is_member(p.owner);

-- dead letters hold payloads: each role sees those of the pipelines it owns
CREATE OR REPLACE VIEW streamguard.dead_letters WITH (security_barrier) AS
SELECT d.pipeline::text AS pipeline, d.partition, d.seq, d.key, d.payload, d.dedup_key, d.appended_at,
	   d.error, d.sqlstate, d.failed_at
FROM streamguard.dead_letter d
JOIN streamguard.pipeline p ON p.id = d.pipeline_id
WHERE streamguard._is_member(p.owner);

CREATE OR REPLACE VIEW streamguard.horizon_holders AS
SELECT s.name::text AS stream, o.partition, o.pid, o.first_seq,
	   a.xact_start, pg_catalog.now() - a.xact_start AS xact_age, a.state
FROM streamguard._open_appends() o
JOIN streamguard.stream s ON s.id = o.stream_id
LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = o.pid;

-- cumulative counts of committed batches by duration, since the server started
CREATE OR REPLACE VIEW streamguard.pipeline_batch_durations AS
SELECT p.name::text AS pipeline, h.le, pg_catalog.sum(h.count)::bigint AS count, pg_catalog.sum(h.sum_seconds) AS sum_seconds,
	   pg_catalog.sum(h.total)::bigint AS total
FROM streamguard._pipeline_histogram() h
JOIN streamguard.pipeline p ON p.id = h.pipeline_id
GROUP BY p.name, h.le;

-- every role sees every capture (as it sees every table in pg_class); the
-- backfill's position (key values) and its error text only the capture's
-- owner and the table's owner (members of each, superusers): a role that
-- may SELECT the table may still be kept from some rows by a policy
CREATE OR REPLACE VIEW streamguard.captures AS
SELECT c.relid AS tab,
	   s.name::text AS stream,
	   ARRAY(SELECT a.attname FROM pg_catalog.unnest(c.key_attnums) WITH ORDINALITY k(attnum, n)
			 JOIN pg_catalog.pg_attribute a ON a.attrelid = c.relid AND a.attnum = k.attnum
			 ORDER BY k.n) AS key_columns,
	   c.operations::text[] AS operations,
	   CASE WHEN c.column_attnums IS NOT NULL THEN
		   ARRAY(SELECT a.attname FROM pg_catalog.unnest(c.column_attnums) WITH ORDINALITY k(attnum, n)
				 JOIN pg_catalog.pg_attribute a ON a.attrelid = c.relid AND a.attnum = k.attnum
				 ORDER BY k.n)
	   END AS columns,
	   c.owner::regrole AS owner,
	   c.backfill_state::text AS backfill_state,
	   c.backfill_rows,
	   c.backfill_skipped,
	   c.backfill_total,
	   CASE WHEN c.backfill_state = 'done' THEN 100
			WHEN c.backfill_total > 0 THEN
				least(99.9, pg_catalog.round(100.0 * (c.backfill_rows + c.backfill_skipped) / c.backfill_total, 1))
	   END AS backfill_percent,
	   CASE WHEN streamguard._is_member(c.owner) OR streamguard._is_member(
				(SELECT r.relowner FROM pg_catalog.pg_class r WHERE r.oid OPERATOR(pg_catalog.=) c.relid))
			THEN c.backfill_after END AS backfill_position,
	   c.backfill_started_at,
	   c.backfill_done_at,
	   CASE WHEN streamguard._is_member(c.owner) OR streamguard._is_member(
				(SELECT r.relowner FROM pg_catalog.pg_class r WHERE r.oid OPERATOR(pg_catalog.=) c.relid))
			THEN c.backfill_error END AS backfill_error,
	   c.created_at
FROM streamguard.capture c
JOIN streamguard.stream s ON s.id = c.stream_id;

-- the members of consumer groups on streams the role may read
-- (_group_members filters too)
CREATE OR REPLACE VIEW streamguard.consumer_group_members WITH (security_barrier) AS
SELECT s.name::text AS stream,
	   m.consumer,
	   m.member,
	   coalesce(a.partitions, '{}') AS partitions,
	   m.lease_expires_at,
	   m.last_poll_at,
	   m.joined_at,
	   m.pid,
	   coalesce(a.lag_events, 0)::bigint AS lag_events
FROM streamguard._group_members() m
JOIN streamguard.stream s ON s.id = m.stream_id
LEFT JOIN LATERAL (
	SELECT pg_catalog.array_agg(ga.partition ORDER BY ga.partition) AS partitions,
		   pg_catalog.sum(c.lag_events) AS lag_events
	FROM streamguard.consumer ga
	LEFT JOIN streamguard.consumers c
		   ON c.stream = s.name AND c.consumer = ga.name AND c.partition = ga.partition
	WHERE ga.stream_id = m.stream_id AND ga.name = m.consumer AND ga.member = m.member
) a ON true
WHERE streamguard._can_watch(m.stream_id);

CREATE OR REPLACE VIEW streamguard.worker_slots AS
SELECT w.scope, w.name, w.pipeline_workers, w.backfill_workers, w.workers, w.cap, w.reserved
FROM streamguard._worker_slots() w;

CREATE OR REPLACE VIEW streamguard.windows WITH (security_barrier) AS
SELECT p.name::text AS pipeline,
	   w.kind::text AS kind,
	   w.size,
	   w.slide,
	   w.time_expr AS event_time,
	   w.key_expr AS key,
	   w.target,
	   w.target_stream::text AS target_stream,
	   w.emit::text AS emit,
	   w.allowed_lateness,
	   w.idle_timeout,
	   w.late::text AS late,
	   w.keep_closed,
	   w.watermark,
	   (SELECT pg_catalog.count(*) FROM streamguard.window_state s
		WHERE s.pipeline_id = w.pipeline_id AND NOT s.closed) AS open_windows,
	   w.windows_closed,
	   w.late_events,
	   w.corrections,
	   w.superseded
FROM streamguard.window_def w
JOIN streamguard.pipeline p ON p.id = w.pipeline_id
WHERE streamguard._is_member(p.owner)
   OR pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE');

-- Kafka lag per partition: for the pipeline's owner, its members,
-- superusers and members of pg_read_all_stats (monitoring).
CREATE OR REPLACE VIEW streamguard.kafka_lag WITH (security_barrier) AS
SELECT p.name::text AS pipeline,
	   p.source_server AS server,
	   p.remote_stream AS topic,
	   k.partition,
	   CASE WHEN k.next_offset >= 0 THEN k.next_offset END AS next_offset,
	   k.high_watermark,
	   CASE WHEN k.next_offset >= 0 AND k.high_watermark IS NOT NULL
			THEN greatest(k.high_watermark - k.next_offset, 0) END AS lag,
	   k.updated_at
FROM streamguard.kafka_position k
JOIN streamguard.pipeline p ON p.id = k.pipeline_id
WHERE streamguard._is_member(p.owner)
   OR pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE');
