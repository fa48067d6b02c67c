-- 3. drain->sink, PgQ: the batch goes into sink_pgq in the same transaction
-- (bench_pgq_drain_sink in setup.sql; -D queue=<name> -D consumer=<name>).
SELECT bench_pgq_drain_sink(:queue, :consumer);
