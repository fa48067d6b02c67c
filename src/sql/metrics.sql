-- metrics(): the numbers of the views in the Prometheus text exposition
-- format; each role gets what the views show it.  Part of the install script
-- and of every update script, after the views it reads.

CREATE OR REPLACE FUNCTION streamguard.metrics()
RETURNS text
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $metrics$
WITH m(name, type, help) AS (VALUES
	('streamguard_stream_partitions', 'gauge', 'Partitions of the stream.'),
	('streamguard_stream_retained_events', 'gauge', 'Events retained (upper bound: aborted appends leave gaps).'),
	('streamguard_stream_append_rate', 'gauge', 'Committed appends per second over the last 10 seconds (0 when idle).'),
	('streamguard_stream_appended_events_total', 'counter', 'Seqs below the readable horizons of the stream''s partitions: events appended and committed, plus the gaps of aborted appends.'),
	('streamguard_stream_in_flight', 'gauge', 'Appends not yet committed or aborted.'),
	('streamguard_stream_segments', 'gauge', 'Segment tables of the stream (the current one and the sealed ones retention has not dropped yet).'),
	('streamguard_stream_segments_expected', 'gauge', 'Segments retention keeps at most: retention / segment_interval rounded up, plus the current one (streams with retention only).'),
	('streamguard_partition_last_seq', 'gauge', 'Highest retained seq of the partition.'),
	('streamguard_partition_horizon_lag', 'gauge', 'Seqs handed out but not yet readable (next_seq - readable_horizon).'),
	('streamguard_horizon_holder_age_seconds', 'gauge', 'Age of the transaction of an open append that holds a partition back.'),
	('streamguard_consumer_lag_events', 'gauge', 'Events after the consumer''s position (upper bound).'),
	('streamguard_consumer_lag_seconds', 'gauge', 'Age of the oldest event the consumer has not read.'),
	('streamguard_consumer_lost_events_total', 'counter', 'Events removed by retention before the consumer read them.'),
	('streamguard_consumer_consumed_events_total', 'counter', 'Seqs up to the consumer''s committed position (events read, with the gaps of aborted appends; a seek back starts it over).'),
	('streamguard_consumer_retention_margin_seconds', 'gauge', 'Time left before retention removes the oldest unread event.'),
	('streamguard_pipeline_info', 'gauge', 'Pipeline definition and state (value 1).'),
	('streamguard_pipeline_worker_up', 'gauge', '1 when a running pipeline has its worker, else 0.'),
	('streamguard_pipeline_failed', 'gauge', '1 when the pipeline stopped on an error (state failed), else 0.'),
	('streamguard_pipeline_batches_total', 'counter', 'Committed batches.'),
	('streamguard_pipeline_events_in_total', 'counter', 'Events consumed.'),
	('streamguard_pipeline_rows_out_total', 'counter', 'Rows written by the pipeline''s SQL.'),
	('streamguard_pipeline_skipped_total', 'counter', 'Events skipped by the error policy or skip_event.'),
	('streamguard_pipeline_dead_letters_total', 'counter', 'Events stored as dead letters.'),
	('streamguard_pipeline_restarts_total', 'counter', 'Unplanned worker restarts (not the first start after a clean server shutdown).'),
	('streamguard_pipeline_lag_events', 'gauge', 'Events not yet consumed.'),
	('streamguard_pipeline_lag_seconds', 'gauge', 'Age of the oldest event not yet consumed.'),
	('streamguard_pipeline_events_per_second', 'gauge', 'Consumption rate (moving average over about 5 seconds, 0 when idle).'),
	('streamguard_pipeline_batch_duration_seconds', 'histogram', 'Duration of committed batches, fetch to commit.'),
	('streamguard_remote_connected', 'gauge', '1 when the worker is connected to the remote server.'),
	('streamguard_remote_prepared_pending', 'gauge', 'Prepared remote transactions not yet settled.'),
	('streamguard_group_member_partitions', 'gauge', 'Partitions assigned to the consumer group member.'),
	('streamguard_group_member_lag_events', 'gauge', 'Events after the positions of the member''s partitions (upper bound).'),
	('streamguard_group_member_lease_remaining_seconds', 'gauge', 'Time left on the member''s lease (0: expired).'),
	('streamguard_window_watermark_timestamp_seconds', 'gauge', 'Watermark of the window pipeline (Unix time).'),
	('streamguard_window_open', 'gauge', 'Windows of the pipeline not yet closed.'),
	('streamguard_window_closed_total', 'counter', 'Windows closed and emitted.'),
	('streamguard_window_late_events_total', 'counter', 'Events that came after their window closed.'),
	('streamguard_window_corrections_total', 'counter', 'Correction rows emitted for closed windows (late => update).'),
	('streamguard_window_superseded_total', 'counter', 'Emitted sessions merged into a session that starts earlier (retracted, or their rows deleted).'),
	('streamguard_kafka_lag_messages', 'gauge', 'Messages of the Kafka partition after the pipeline''s stored offset.')
),
-- group members: consumer and member names may hold any character, escaped for a label
g AS (
	SELECT format('stream="%s",consumer="%s",member="%s"', stream,
		replace(replace(replace(consumer, '\', '\\'), '"', '\"'), E'\n', '\n'),
		replace(replace(replace(member, '\', '\\'), '"', '\"'), E'\n', '\n')) AS labels,
		partitions, lag_events, lease_expires_at
	FROM streamguard.consumer_group_members
),
s(name, labels, value) AS (
	SELECT 'streamguard_stream_partitions', format('stream="%s"', stream), partitions::text
	FROM streamguard.streams
	UNION ALL SELECT 'streamguard_stream_retained_events', format('stream="%s"', stream), retained_events::text
	FROM streamguard.streams
	UNION ALL SELECT 'streamguard_stream_append_rate', format('stream="%s"', stream), append_rate::text
	FROM streamguard.streams
	UNION ALL SELECT 'streamguard_stream_in_flight', format('stream="%s"', stream), in_flight::text
	FROM streamguard.streams
	UNION ALL SELECT 'streamguard_stream_segments', format('stream="%s"', stream), segments::text
	FROM streamguard.streams
	UNION ALL SELECT 'streamguard_stream_segments_expected', format('stream="%s"', stream),
		(ceil(extract(epoch FROM retention) / extract(epoch FROM segment_interval))::bigint + 1)::text
	FROM streamguard.streams WHERE retention IS NOT NULL
	UNION ALL SELECT 'streamguard_stream_appended_events_total', format('stream="%s"', stream),
		sum(greatest(readable_horizon - 1, 0))::text
	FROM streamguard.stream_partitions WHERE readable_horizon IS NOT NULL GROUP BY stream
	UNION ALL SELECT 'streamguard_partition_last_seq', format('stream="%s",partition="%s"', stream, partition),
		coalesce(last_seq, 0)::text
	FROM streamguard.stream_partitions
	UNION ALL SELECT 'streamguard_partition_horizon_lag', format('stream="%s",partition="%s"', stream, partition),
		(next_seq - readable_horizon)::text
	FROM streamguard.stream_partitions WHERE readable_horizon IS NOT NULL
	UNION ALL SELECT 'streamguard_horizon_holder_age_seconds',
		format('stream="%s",partition="%s",pid="%s"', stream, partition, pid),
		coalesce(extract(epoch FROM xact_age), 0)::text
	FROM streamguard.horizon_holders
	UNION ALL SELECT 'streamguard_consumer_lag_events',
		format('stream="%s",consumer="%s",partition="%s"', stream, consumer, partition), lag_events::text
	FROM streamguard.consumers
	UNION ALL SELECT 'streamguard_consumer_lag_seconds',
		format('stream="%s",consumer="%s",partition="%s"', stream, consumer, partition), lag_seconds::text
	FROM streamguard.consumers
	UNION ALL SELECT 'streamguard_consumer_consumed_events_total',
		format('stream="%s",consumer="%s",partition="%s"', stream, consumer, partition),
		greatest(committed_seq, 0)::text
	FROM streamguard.consumers
	UNION ALL SELECT 'streamguard_consumer_lost_events_total',
		format('stream="%s",consumer="%s",partition="%s"', stream, consumer, partition), lost_events::text
	FROM streamguard.consumers
	UNION ALL SELECT 'streamguard_consumer_retention_margin_seconds',
		format('stream="%s",consumer="%s",partition="%s"', c.stream, c.consumer, c.partition),
		greatest(extract(epoch FROM st.retention) - c.lag_seconds, 0)::text
	FROM streamguard.consumers c JOIN streamguard.streams st ON st.stream = c.stream
	WHERE st.retention IS NOT NULL AND c.lag_events > 0
	UNION ALL SELECT 'streamguard_pipeline_info',
		format('pipeline="%s",source="%s",guarantee="%s",state="%s"', pipeline,
			replace(replace(source, '\', '\\'), '"', '\"'), guarantee, state), '1'
	FROM streamguard.pipelines
	UNION ALL SELECT 'streamguard_pipeline_worker_up', format('pipeline="%s"', pipeline),
		(worker_pid IS NOT NULL)::int::text
	FROM streamguard.pipelines WHERE state = 'running'
	UNION ALL SELECT 'streamguard_pipeline_failed', format('pipeline="%s"', pipeline),
		(state = 'failed')::int::text
	FROM streamguard.pipelines
	UNION ALL SELECT 'streamguard_pipeline_batches_total', format('pipeline="%s"', pipeline), batches::text
	FROM streamguard.pipelines
	UNION ALL SELECT 'streamguard_pipeline_events_in_total', format('pipeline="%s"', pipeline), events_in::text
	FROM streamguard.pipelines
	UNION ALL SELECT 'streamguard_pipeline_rows_out_total', format('pipeline="%s"', pipeline), rows_out::text
	FROM streamguard.pipelines
	UNION ALL SELECT 'streamguard_pipeline_skipped_total', format('pipeline="%s"', pipeline), skipped::text
	FROM streamguard.pipelines
	UNION ALL SELECT 'streamguard_pipeline_dead_letters_total', format('pipeline="%s"', pipeline), dead_letters::text
	FROM streamguard.pipelines
	UNION ALL SELECT 'streamguard_pipeline_restarts_total', format('pipeline="%s"', pipeline), restarts::text
	FROM streamguard.pipelines
	UNION ALL SELECT 'streamguard_pipeline_lag_events', format('pipeline="%s"', pipeline), lag_events::text
	FROM streamguard.pipelines WHERE lag_events IS NOT NULL
	UNION ALL SELECT 'streamguard_pipeline_lag_seconds', format('pipeline="%s"', pipeline), lag_seconds::text
	FROM streamguard.pipelines WHERE lag_seconds IS NOT NULL
	UNION ALL SELECT 'streamguard_pipeline_events_per_second', format('pipeline="%s"', pipeline),
		events_per_sec::text
	FROM streamguard.pipelines
	UNION ALL SELECT 'streamguard_pipeline_batch_duration_seconds_bucket',
		format('pipeline="%s",le="%s"', pipeline, le), count::text
	FROM streamguard.pipeline_batch_durations
	UNION ALL SELECT DISTINCT 'streamguard_pipeline_batch_duration_seconds_sum', format('pipeline="%s"', pipeline),
		sum_seconds::text
	FROM streamguard.pipeline_batch_durations
	UNION ALL SELECT DISTINCT 'streamguard_pipeline_batch_duration_seconds_count', format('pipeline="%s"', pipeline),
		total::text
	FROM streamguard.pipeline_batch_durations
	UNION ALL SELECT 'streamguard_remote_connected',
		format('pipeline="%s",side="%s",foreign_server="%s"', pipeline, side,
			replace(replace(server, '\', '\\'), '"', '\"')), connected::int::text
	FROM streamguard.remote_status
	UNION ALL SELECT 'streamguard_remote_prepared_pending',
		format('pipeline="%s",foreign_server="%s"', pipeline, replace(replace(server, '\', '\\'), '"', '\"')),
		prepared_pending::text
	FROM streamguard.remote_status WHERE side = 'sink'
	UNION ALL SELECT 'streamguard_group_member_partitions',
		labels, cardinality(partitions)::text
	FROM g
	UNION ALL SELECT 'streamguard_group_member_lag_events', labels, lag_events::text
	FROM g
	UNION ALL SELECT 'streamguard_group_member_lease_remaining_seconds',
		labels,
		greatest(extract(epoch FROM lease_expires_at - now()), 0)::text
	FROM g
	UNION ALL SELECT 'streamguard_window_watermark_timestamp_seconds', format('pipeline="%s"', pipeline),
		extract(epoch FROM watermark)::text
	FROM streamguard.windows WHERE watermark IS NOT NULL
	UNION ALL SELECT 'streamguard_window_open', format('pipeline="%s"', pipeline), open_windows::text
	FROM streamguard.windows
	UNION ALL SELECT 'streamguard_window_closed_total', format('pipeline="%s"', pipeline), windows_closed::text
	FROM streamguard.windows
	UNION ALL SELECT 'streamguard_window_late_events_total', format('pipeline="%s"', pipeline), late_events::text
	FROM streamguard.windows
	UNION ALL SELECT 'streamguard_window_corrections_total', format('pipeline="%s"', pipeline), corrections::text
	FROM streamguard.windows
	UNION ALL SELECT 'streamguard_window_superseded_total', format('pipeline="%s"', pipeline), superseded::text
	FROM streamguard.windows
	UNION ALL SELECT 'streamguard_kafka_lag_messages',
		format('pipeline="%s",topic="%s",partition="%s"', pipeline, replace(replace(replace(topic, '\', '\\'), '"', '\"'), E'\n', '\n'), partition), lag::text
	FROM streamguard.kafka_lag WHERE lag IS NOT NULL
)
-- Prometheus text: HELP then TYPE, each series with the database first;
-- a series after another by its labels; a histogram's buckets by le,
-- ascending, +Inf last (le is the last label), then _count and _sum
SELECT string_agg(block, '' ORDER BY name)
FROM (
	SELECT m.name,
		format(E'# HELP %s %s\n# TYPE %s %s\n', m.name, m.help, m.name, m.type)
		|| coalesce(string_agg(format(E'%s{database="%s",%s} %s\n', s.name, db.label, s.labels, s.value), ''
			ORDER BY regexp_replace(s.labels, ',le="[^"]*"$', ''), s.name,
				CASE WHEN s.labels ~ ',le="[^"]*"$'
					 THEN substring(s.labels FROM ',le="([^"]*)"$')::float8 END)
			FILTER (WHERE s.name IS NOT NULL), '') AS block
	FROM m LEFT JOIN s ON s.name = m.name OR s.name LIKE m.name || '\_%'
		AND m.type = 'histogram'
	CROSS JOIN (SELECT replace(replace(replace(current_database(), '\', '\\'), '"', '\"'), E'\n', '\n')
				AS label) db
	GROUP BY m.name, m.type, m.help
) blocks
$metrics$;
