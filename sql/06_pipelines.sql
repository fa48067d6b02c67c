-- pipelines: SQL surface, validation, bad input, and a running pipeline end to end
SET client_min_messages = warning;

SELECT streamguard.create_stream('orders', 3);
CREATE TABLE totals (customer text PRIMARY KEY, amount numeric NOT NULL);

SELECT streamguard.create_pipeline('order_totals', 'orders',
  $$INSERT INTO totals(customer, amount)
      SELECT key, sum((payload->>'amount')::numeric) FROM batch GROUP BY key
    ON CONFLICT (customer) DO UPDATE SET amount = totals.amount + excluded.amount$$,
  batch_size => 50);
SELECT pipeline, source, state, guarantee, batch_size, error_policy FROM streamguard.pipelines;

SELECT count(*) FROM streamguard.append_batch('orders',
	(SELECT array_agg(jsonb_build_object('amount', g)) FROM generate_series(1, 300) g),
	keys => (SELECT array_agg('c' || (g % 4)) FROM generate_series(1, 300) g));
SELECT wait_for($$(SELECT sum(amount) FROM totals) = 45150$$);
SELECT customer, amount FROM totals ORDER BY customer;
SELECT wait_for($$(SELECT lag_events FROM streamguard.pipelines WHERE pipeline = 'order_totals') = 0$$);
SELECT pipeline, state, events_in, worker_pid IS NOT NULL AS has_worker, last_error
FROM streamguard.pipelines;
SELECT consumer, sum(committed_seq) AS consumed FROM streamguard.consumers
WHERE stream = 'orders' GROUP BY consumer;
SELECT count(*) > 0 AS has_history, bool_and(events_in <= 50) AS batches_bounded
FROM streamguard.pipeline_batches WHERE pipeline = 'order_totals';

-- pause: appends wait; resume: they are processed
SELECT streamguard.pause_pipeline('order_totals');
SELECT wait_for($$(SELECT worker_pid IS NULL FROM streamguard.pipelines WHERE pipeline = 'order_totals')$$);
SELECT * FROM streamguard.append('orders', '{"amount": 1000}', key => 'c0');
SELECT pg_sleep(0.5);
SELECT amount FROM totals WHERE customer = 'c0';
SELECT state FROM streamguard.pipelines;
SELECT streamguard.resume_pipeline('order_totals');
SELECT wait_for($$(SELECT amount FROM totals WHERE customer = 'c0') = 12400$$);

-- reset replays from the beginning: everything is added a second time
SELECT streamguard.reset_pipeline('order_totals');
SELECT wait_for($$(SELECT sum(amount) FROM totals) = 2 * 46150$$);

-- alter: the new SQL applies to new events
SELECT streamguard.alter_pipeline('order_totals',
  sql => $$INSERT INTO totals(customer, amount)
      SELECT 'altered', count(*) FROM batch
    ON CONFLICT (customer) DO UPDATE SET amount = totals.amount + excluded.amount$$);
SELECT * FROM streamguard.append('orders', '{"amount": 5}', key => 'c1');
SELECT wait_for($$(SELECT amount FROM totals WHERE customer = 'altered') = 1$$);

-- validation: errors with their position, nothing created
SELECT try($$SELECT streamguard.create_pipeline('bad', 'orders', 'selec 1')$$);
SELECT try($$SELECT streamguard.create_pipeline('bad', 'orders', 'INSERT INTO nosuch SELECT * FROM batch')$$);
SELECT try($$SELECT streamguard.create_pipeline('bad', 'orders', 'SELECT nosuchcol FROM batch')$$);
SELECT try($$SELECT streamguard.create_pipeline('bad', 'orders', 'COMMIT')$$);
SELECT try($$SELECT streamguard.create_pipeline('bad', 'orders', '  ')$$);
SELECT try($$SELECT streamguard.create_pipeline('bad', 'orders', NULL)$$);
SELECT try($$SELECT streamguard.create_pipeline('bad', 'nostream', 'SELECT 1')$$);
SELECT try($$SELECT streamguard.create_pipeline('bad', 'orders', 'SELECT 1', guarantee => 'twice')$$);
SELECT try($$SELECT streamguard.create_pipeline('bad', 'orders', 'SELECT 1', guarantee => NULL)$$);
SELECT try($$SELECT streamguard.create_pipeline('bad', 'orders', 'SELECT 1', batch_size => 0)$$);
SELECT try($$SELECT streamguard.create_pipeline('bad', 'orders', 'SELECT 1', batch_size => 100001)$$);
-- NULL: the default (1,000; a Kafka sink's is 10,000, test/t/141)
SELECT streamguard.create_pipeline('nullbatch', 'orders', 'SELECT 1', batch_size => NULL);
SELECT batch_size FROM streamguard.pipelines WHERE pipeline = 'nullbatch';
SELECT streamguard.drop_pipeline('nullbatch');
SELECT try($$SELECT streamguard.create_pipeline('bad', 'orders', 'SELECT 1', error_policy => 'ignore')$$);
SELECT try($$SELECT streamguard.create_pipeline('bad', 'orders', 'SELECT 1', start_from => 'middle')$$);
SELECT try($$SELECT streamguard.create_pipeline('', 'orders', 'SELECT 1')$$);
SELECT try($$SELECT streamguard.create_pipeline('x"; DROP TABLE totals; --', 'orders', 'SELECT 1')$$);
SELECT try($$SELECT streamguard.create_pipeline('order_totals', 'orders', 'SELECT 1')$$);
SELECT count(*) AS pipelines FROM streamguard.pipeline;
SELECT try($$SELECT streamguard.pause_pipeline('nope')$$);
SELECT try($$SELECT streamguard.resume_pipeline(NULL)$$);
SELECT try($$SELECT streamguard.drop_pipeline('nope')$$);
SELECT try($$SELECT streamguard.reset_pipeline('order_totals', seq => 0)$$);
SELECT try($$SELECT streamguard.reset_pipeline('order_totals', seq => 1, from_time => now())$$);
SELECT try($$SELECT streamguard.reset_pipeline('order_totals', seq => 1, partition => 7)$$);
SELECT try($$SELECT streamguard.alter_pipeline('order_totals', batch_size => -1)$$);
SELECT try($$SELECT streamguard.alter_pipeline('order_totals', sql => 'SELEC')$$);
SELECT try($$SELECT streamguard.inject_fault('order_totals', 'sometime')$$);
SELECT try($$SELECT streamguard.inject_fault('order_totals', 'mid_batch', 'explode')$$);
-- dead letters: a poison event is stored with its error, the owner purges them
CREATE TABLE ratios (v numeric);
SELECT streamguard.create_pipeline('ratios', 'orders',
	$$INSERT INTO ratios SELECT 100 / (payload->>'amount')::numeric FROM batch$$,
	error_policy => 'dead_letter', start_from => 'end');
SELECT * FROM streamguard.append('orders', '{"amount": 0}', key => 'zero');
SELECT * FROM streamguard.append('orders', '{"amount": 4}', key => 'four');
SELECT wait_for($$(SELECT count(*) FROM streamguard.dead_letters WHERE pipeline = 'ratios') = 1
	AND (SELECT count(*) FROM ratios) = 1$$);
SELECT pipeline, key, payload, error, sqlstate FROM streamguard.dead_letters;
SELECT v FROM ratios;
SELECT streamguard.purge_dead_letters('ratios', older_than => '1 hour');
SELECT streamguard.purge_dead_letters('ratios');
SELECT count(*) FROM streamguard.dead_letters;
SELECT try($$SELECT streamguard.purge_dead_letters('nope')$$);
SELECT streamguard.drop_pipeline('ratios');

-- the stream cannot be dropped under a pipeline
SELECT try($$SELECT streamguard.drop_stream('orders')$$);

-- only the owner manages a pipeline; the SQL runs with the owner's rights
CREATE ROLE sg_pipe_owner;
CREATE ROLE sg_other;
CREATE TABLE mine (v int);
CREATE TABLE secret (v int);
GRANT INSERT ON mine TO sg_pipe_owner;
SELECT streamguard.grant_stream('orders', 'sg_pipe_owner', 'read');
SET ROLE sg_pipe_owner;
SELECT streamguard.create_pipeline('owned', 'orders',
	$$INSERT INTO mine SELECT 1 FROM batch; INSERT INTO secret SELECT 1 FROM batch$$);
RESET ROLE;
SET ROLE sg_other;
SELECT try($$SELECT streamguard.pause_pipeline('owned')$$);
SELECT try($$SELECT streamguard.drop_pipeline('owned')$$);
SELECT try($$SELECT streamguard.reset_pipeline('owned')$$);
SELECT try($$SELECT streamguard.inject_fault('owned', 'mid_batch')$$);
SELECT try($$SELECT streamguard.create_pipeline('sneaky', 'orders', 'SELECT 1')$$);
RESET ROLE;
-- the owner's pipeline cannot write where the owner cannot
SELECT wait_for($$(SELECT last_error FROM streamguard.pipelines WHERE pipeline = 'owned') LIKE 'permission denied%'$$);
SELECT count(*) AS secret_rows FROM secret;
SELECT count(*) AS mine_rows FROM mine;
SET ROLE sg_pipe_owner;
SELECT streamguard.drop_pipeline('owned');
RESET ROLE;

-- a worker runs with jit off (a plan would be compiled again every
-- batch); the SQL may turn it on for its own batch, and the next batch
-- starts with it off again
CREATE TABLE jit_seen (batch_no int, before_set text, after_set text);
SELECT streamguard.create_pipeline('jit_probe', 'orders',
	$$INSERT INTO jit_seen SELECT (SELECT count(*) FROM jit_seen) + 1, current_setting('jit'), NULL FROM batch LIMIT 1;
	SET LOCAL jit = on;
	UPDATE jit_seen SET after_set = current_setting('jit') WHERE after_set IS NULL$$,
	start_from => 'end');
SELECT wait_for($$(SELECT worker_pid IS NOT NULL FROM streamguard.pipelines WHERE pipeline = 'jit_probe')$$);
SELECT streamguard.append('orders', '{"n": 1}') IS NOT NULL AS appended;
SELECT wait_for($$(SELECT count(*) FROM jit_seen) = 1$$);
SELECT streamguard.append('orders', '{"n": 2}') IS NOT NULL AS appended;
SELECT wait_for($$(SELECT count(*) FROM jit_seen) = 2$$);
SELECT batch_no, before_set, after_set FROM jit_seen ORDER BY batch_no;
SELECT streamguard.drop_pipeline('jit_probe');
DROP TABLE jit_seen;

SELECT streamguard.drop_pipeline('order_totals');
SELECT count(*) AS consumers_left FROM streamguard.consumers WHERE consumer LIKE 'pipeline:%';
SELECT streamguard.drop_stream('orders', force => true);
REVOKE INSERT ON mine FROM sg_pipe_owner;
DROP ROLE sg_pipe_owner, sg_other;
