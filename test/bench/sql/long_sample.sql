-- 6. long run: one sample (run by psql every second; -v stream=<name>
-- -v pipeline=<name>): epoch, events appended, consumed by the pipeline,
-- retained, segments, their size, lost to retention, streamguard's catalog
-- size, sink size, longest fetch and SQL + commit of the last batches, lock waits.
SELECT extract(epoch FROM clock_timestamp()),
       (SELECT coalesce(sum(last_seq), 0) FROM streamguard.stream_partitions WHERE stream = :'stream'),
       (SELECT coalesce(sum(committed_seq), 0) FROM streamguard.consumers WHERE stream = :'stream' AND consumer = 'pipeline:' || :'pipeline'),
       (SELECT coalesce(retained_events, 0) FROM streamguard.streams WHERE stream = :'stream'),
       (SELECT count(*) FROM streamguard.segment g JOIN streamguard.stream s ON s.id = g.stream_id WHERE s.name = :'stream'),
       (SELECT coalesce(sum(pg_total_relation_size(to_regclass(format('streamguard_data.%I', 's' || g.stream_id || '_' || g.seg)))), 0)
          FROM streamguard.segment g JOIN streamguard.stream s ON s.id = g.stream_id WHERE s.name = :'stream'),
       (SELECT coalesce(sum(lost_events), 0) FROM streamguard.consumers WHERE stream = :'stream' AND consumer = 'pipeline:' || :'pipeline'),
       (SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
         WHERE ns.nspname = 'streamguard' AND c.relkind = 'r'),
       pg_total_relation_size('sink_long'),
       (SELECT coalesce(max(fetch_ms), 0) FROM streamguard.pipeline_batches WHERE pipeline = :'pipeline'),
       (SELECT coalesce(max(process_ms + commit_ms), 0) FROM streamguard.pipeline_batches WHERE pipeline = :'pipeline'),
       (SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database());
