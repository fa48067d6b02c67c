-- 3. drain, PgQ: next_batch / count of get_batch_events / finish_batch
-- (bench_pgq_drain in setup.sql; -D queue=<name> -D consumer=<name>).
SELECT bench_pgq_drain(:queue, :consumer);
