# Mutants for test/mutation/run.pl.  Each breaks one guarantee with a small
# edit and names the tests that must catch it, cheapest first (the first
# failing test kills the mutant; the rest are not run).
#
#	name	 short identifier (SG_MUTANTS=name,name selects)
#	breaks	 the guarantee it breaks, in words
#	edits	 [ file, exact search text, replacement ], ...; each search text
#			 must occur exactly once in its file, or run.pl refuses to start
#	tests	 regress:<sql/ name>, isolation:<spec name>, tap:<test/t/ file>
#
# Replacements keep every variable used: the build has -Werror.

(
	{
		name => 'horizon_ignores_open_appends',
		breaks => 'no skip: the readable horizon ignores in-flight appends (returns next_seq)',
		edits => [ [ 'src/horizon.c',
			"\tif (in_flight)\n\t\t*in_flight = open;\n\treturn horizon;\n",
			"\tif (in_flight)\n\t\t*in_flight = open;\n\treturn horizon > 0 ? next : next;\n" ] ],
		tests => [ 'isolation:horizon', 'tap:030_torture.pl' ],
	},
	{
		name => 'fetch_uses_transaction_snapshot',
		breaks => 'no skip: poll reads with the transaction snapshot instead of a fresh one taken after the horizon',
		edits => [ [ 'src/consumer.c',
			"\t\tsnap = SgFreshSnapshot();\n\t\tgot = sg_read_partition(meta, p, locked_pos,",
			"\t\tsnap = RegisterSnapshot(GetTransactionSnapshot());\n\t\tgot = sg_read_partition(meta, p, locked_pos," ] ],
		tests => [ 'isolation:horizon', 'isolation:poll_concurrent', 'regress:03_poll' ],
	},
	{
		name => 'poll_waits_instead_of_skipping',
		breaks => 'two sessions sharing a consumer: a held partition is waited for instead of skipped',
		edits => [ [ 'src/consumer.c',
			"\"AND partition OPERATOR(pg_catalog.=) \$3 FOR UPDATE SKIP LOCKED\" :",
			"\"AND partition OPERATOR(pg_catalog.=) \$3 FOR UPDATE\" :" ] ],
		tests => [ 'isolation:poll_concurrent' ],
	},
	{
		name => 'prepare_with_appends_allowed',
		breaks => 'a transaction that appended can be prepared (its appends would hold the horizon)',
		edits => [ [ 'src/horizon.c',
			"\t\t\tif (sg_backend_area != NULL && MyProc != NULL &&\n",
			"\t\t\tif (false && sg_backend_area != NULL && MyProc != NULL &&\n" ] ],
		tests => [ 'regress:05_prepare', 'tap:015_prepare.pl' ],
	},
	{
		name => 'fence_always_passes',
		breaks => 'fencing: sg_fence returns true, a worker that lost its pipeline goes on (the epoch check in the counters update stays)',
		edits => [ [ 'src/batch.c',
			"\tSgRestoreUser(&save);\n\treturn ok;\n}\n\nstatic void\nsg_count_batch(",
			"\tSgRestoreUser(&save);\n\treturn ok || true;\n}\n\nstatic void\nsg_count_batch(" ] ],
		tests => [ 'tap:065_pipeline_zombie.pl', 'tap:060_pipeline_runtime.pl' ],
	},
	{
		name => 'fence_ignores_worker_epoch',
		breaks => 'fencing of a worker\'s incarnations: the fence checks the generation but not the worker\'s own epoch, so a zombie worker commits after its successor started',
		edits => [ [ 'src/batch.c',
			"\t\tDatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull)) == w->def.epoch;",
			"\t\tDatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull)) >= 0;" ] ],
		tests => [ 'tap:065_pipeline_zombie.pl' ],
	},
	{
		name => 'count_epoch_check_removed',
		breaks => 'fencing, second line: the counters update of a batch checks neither the generation nor the worker epoch',
		edits => [ [ 'src/batch.c',
			"\"WHERE id OPERATOR(pg_catalog.=) \$1 AND generation OPERATOR(pg_catalog.=) \$6 \"",
			"\"WHERE id OPERATOR(pg_catalog.=) \$1 AND \$6::int8 IS NOT NULL \"" ],
		  [ 'src/batch.c',
			"\"AND w.epoch OPERATOR(pg_catalog.=) \$9)\",",
			"\"AND \$9::int8 IS NOT NULL)\"," ] ],
		tests => [ 'tap:065_pipeline_zombie.pl', 'tap:060_pipeline_runtime.pl' ],
	},
	{
		name => 'fence_and_epoch_check_removed',
		breaks => 'fencing: both the fence and the epoch check of the counters update are gone',
		edits => [
			[ 'src/batch.c',
				"\tSgRestoreUser(&save);\n\treturn ok;\n}\n\nstatic void\nsg_count_batch(",
				"\tSgRestoreUser(&save);\n\treturn ok || true;\n}\n\nstatic void\nsg_count_batch(" ],
			[ 'src/batch.c',
				"\"WHERE id OPERATOR(pg_catalog.=) \$1 AND generation OPERATOR(pg_catalog.=) \$6 \"",
				"\"WHERE id OPERATOR(pg_catalog.=) \$1 AND \$6::int8 IS NOT NULL \"" ],
			[ 'src/batch.c',
				"\"AND w.epoch OPERATOR(pg_catalog.=) \$9)\",",
				"\"AND \$9::int8 IS NOT NULL)\"," ] ],
		tests => [ 'tap:065_pipeline_zombie.pl' ],
	},
	{
		name => 'control_call_no_step_aside',
		breaks => 'control calls do not ask the worker to step aside: they queue behind the backlog',
		edits => [ [ 'src/pipeline_slots.c',
			"\t\ts->fence_requested = true;\n",
			"\t\ts->fence_requested = false;\n" ] ],
		tests => [ 'tap:060_pipeline_runtime.pl' ],
	},
	{
		name => 'dedup_never_matches',
		breaks => 'producer dedup: a retried append with the same dedup_key appends again',
		edits => [ [ 'src/append.c',
			"\t\t\tev[idx[i]].duplicate = true;\n",
			"\t\t\tev[idx[i]].duplicate = false;\n" ] ],
		tests => [ 'regress:02_append', 'isolation:dedup' ],
	},
	{
		name => 'pipeline_dedup_never_matches',
		breaks => 'pipeline dedup (dedup => true): events whose key was processed are processed again',
		edits => [ [ 'src/batchexec.c',
			"\t\t\tif (hash_search(fresh, hk, HASH_FIND, NULL) == NULL)\n\t\t\t\tcontinue;\t\t/* seen before */\n",
			"\t\t\tif (hash_search(fresh, hk, HASH_FIND, NULL) == NULL && false)\n\t\t\t\tcontinue;\t\t/* seen before */\n" ] ],
		tests => [ 'tap:065_pipeline_zombie.pl', 'regress:07_hardening' ],
	},
	{
		name => 'position_never_advances',
		breaks => 'no duplicate effect: exactly_once and at_most_once never move the positions in the batch',
		edits => [ [ 'src/batch.c',
			"\tadvance_in_fetch = w->def.guarantee != SG_AT_LEAST_ONCE;\n",
			"\tadvance_in_fetch = w->def.guarantee != SG_AT_LEAST_ONCE && false;\n" ] ],
		tests => [ 'regress:06_pipelines', 'tap:060_pipeline_runtime.pl' ],
	},
	{
		name => 'exactly_once_as_at_most_once',
		breaks => 'exactly_once commits the positions in a transaction of their own before the effects',
		edits => [
			[ 'src/batch.c',
				"\tif (w->def.guarantee == SG_AT_MOST_ONCE)\n\t{\n\t\t/* positions first */",
				"\tif (w->def.guarantee != SG_AT_LEAST_ONCE)\n\t{\n\t\t/* positions first */" ],
			[ 'src/batch.c',
				"\tif (w->def.guarantee != SG_AT_MOST_ONCE)\n\t\tsg_count_batch(w, 1, fetched, rows_out);",
				"\tif (w->def.guarantee == SG_AT_LEAST_ONCE)\n\t\tsg_count_batch(w, 1, fetched, rows_out);" ] ],
		tests => [ 'tap:060_pipeline_runtime.pl', 'tap:050_pipeline_crash_matrix.pl' ],
	},
	{
		name => 'at_least_once_positions_first',
		breaks => 'at_least_once moves the positions with the fetch, before the effects commit (loss possible)',
		edits => [ [ 'src/batch.c',
			"\tadvance_in_fetch = w->def.guarantee != SG_AT_LEAST_ONCE;\n",
			"\tadvance_in_fetch = w->def.guarantee != SG_AT_LEAST_ONCE || true;\n" ] ],
		tests => [ 'tap:065_pipeline_zombie.pl', 'tap:050_pipeline_crash_matrix.pl' ],
	},
	{
		name => 'in_doubt_always_rolls_back',
		breaks => 'two_phase sinks: in-doubt resolution rolls back a batch that committed locally (loss)',
		edits => [ [ 'src/twophase.c',
			"RemoteExecOk(r, psprintf(\"%s PREPARED %s\", known[i] ? \"COMMIT\" : \"ROLLBACK\", gid));",
			"RemoteExecOk(r, psprintf(\"%s PREPARED %s\", known[i] && false ? \"COMMIT\" : \"ROLLBACK\", gid));" ] ],
		tests => [ 'tap:070_remote_sink.pl' ],
	},
	{
		name => 'in_doubt_always_commits',
		breaks => 'two_phase sinks: in-doubt resolution commits a batch that never committed locally (duplicate)',
		edits => [ [ 'src/twophase.c',
			"RemoteExecOk(r, psprintf(\"%s PREPARED %s\", known[i] ? \"COMMIT\" : \"ROLLBACK\", gid));",
			"RemoteExecOk(r, psprintf(\"%s PREPARED %s\", known[i] || true ? \"COMMIT\" : \"ROLLBACK\", gid));" ] ],
		tests => [ 'tap:070_remote_sink.pl' ],
	},
	{
		name => 'offsets_not_forward_only',
		breaks => 'offsets sinks: a retried batch overwrites offsets an earlier, delayed attempt committed (duplicate)',
		edits => [ [ 'src/sink.c',
			"\"WHERE o.position < CASE excluded.partition%s END RETURNING 1\", firsts.data);",
			"\"WHERE true OR o.position < CASE excluded.partition%s END RETURNING 1\", firsts.data);" ] ],
		tests => [ 'tap:086_offsets_forward.pl', 'tap:070_remote_sink.pl' ],
	},
	{
		name => 'seq_floor_ignored',
		breaks => 'seqs after retention and a crash: the floor left by retention is ignored, seqs are reused',
		edits => [ [ 'src/catalog.c',
			"\" SELECT seq_floor AS x FROM streamguard.stream_partition \"",
			"\" SELECT 0::bigint AS x FROM streamguard.stream_partition \"" ] ],
		tests => [ 'tap:041_seq_floor.pl', 'tap:040_retention.pl' ],
	},
);
