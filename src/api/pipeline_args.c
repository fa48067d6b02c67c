/*-------------------------------------------------------------------------
 *
 * pipeline_args.c
 *		What create_pipeline and alter_pipeline are given, read into the
 *		form their implementations take (api/pipeline.c).
 *
 * PipelineCreateArgs reads create_pipeline's arguments into an
 * SgPipelineSpec, each checked on its own and every word parsed into its
 * C enum; PipelineCheckEnds then checks what the two ends allow together
 * and fills the defaults a Kafka sink implies; PipelineCheckAccess checks,
 * as the caller, what the pipeline will touch (its source, its SQL, its
 * sink).  PipelineAlterArgs reads alter_pipeline's arguments into an
 * SgPipelineChange, and PipelineCheckNewSql checks a new SQL as the
 * caller.  Nothing here writes the catalog.  Locks: none of its own;
 * PipelineCheckAccess takes the share lock on a local source stream's row
 * (StreamLockShare), kept until the creating transaction ends, so that the
 * stream cannot be dropped under the new pipeline.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "api/pipeline.h"
#include "api/pipeline_int.h"
#include "api/pipeline_validate.h"
#include "catalog/pipeline_catalog.h"
#include "catalog/sg_catalog.h"
#include "core/util.h"
#include "io/kafka.h"

/* ------------------------------------------------------ create_pipeline */

/* names of create_pipeline's arguments 13 to 17 (settings of 0.2) */
static const char *const sg_create_settings_args[] = {
	"batch_timeout", "allow_source_append", "max_attempts", "retry_backoff", "max_backoff"
};

/* create_pipeline's arguments 13 to 18, the settings of 0.2, checked */
static void
sg_create_settings(FunctionCallInfo fcinfo, SgPipelineSpec *spec)
{
	int			a;

	for (a = 13; a < 18; a++)
		if (PG_ARGISNULL(a))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not be NULL", sg_create_settings_args[a - 13])));
	spec->batch_timeout = PG_GETARG_INTERVAL_P(13);
	spec->allow_source_append = PG_GETARG_BOOL(14);
	spec->max_attempts = PG_GETARG_INT32(15);
	spec->retry_backoff = PG_GETARG_INTERVAL_P(16);
	spec->max_backoff = PG_GETARG_INTERVAL_P(17);
	PipelineCheckBatchTimeout(spec->batch_timeout);
	PipelineCheckRetry(spec->max_attempts, spec->retry_backoff, spec->max_backoff);
	if (PG_ARGISNULL(18))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("workers must not be NULL")));
	spec->workers = PG_GETARG_INT32(18);
	PipelineCheckWorkers(spec->workers);
}

/*
 * create_pipeline's arguments, each checked on its own and every word
 * parsed, in the order of the signature: name, source, sql, guarantee,
 * batch_size, error_policy, dedup, dedup_window, then (0.2) the settings,
 * then start_from, source_server, sink_server, sink_table, sink_mode and
 * (0.2) sink_on_conflict.  The 0.1 signature ends at sink_mode.
 */
void
PipelineCreateArgs(FunctionCallInfo fcinfo, bool signature_0_1, SgPipelineSpec *spec)
{
	memset(spec, 0, sizeof(*spec));
	spec->catalog_0_1 = signature_0_1;
	spec->workers = 1;
	spec->name = SgTextArg(fcinfo, 0, "pipeline name");
	SgCheckName("pipeline", spec->name);
	spec->source = SgTextArg(fcinfo, 1, "source");
	spec->sql = SgTextArg(fcinfo, 2, "sql");
	spec->guarantee = (SgGuarantee) SgParseWord(&SgGuaranteeWords, SgTextArg(fcinfo, 3, "guarantee"));
	/* NULL: the default, which depends on the sink (PipelineCreate) */
	spec->batch_size = PG_ARGISNULL(4) ? -1 : PG_GETARG_INT32(4);
	if (!PG_ARGISNULL(4))
		PipelineCheckBatchSize(spec->batch_size);
	spec->policy = (SgErrorPolicy) SgParseWord(&SgErrorPolicyWords, SgTextArg(fcinfo, 5, "error_policy"));
	if (PG_ARGISNULL(6) || PG_ARGISNULL(7))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be NULL", PG_ARGISNULL(6) ? "dedup" : "dedup_window")));
	spec->dedup = PG_GETARG_BOOL(6);
	spec->dedup_window = PG_GETARG_INTERVAL_P(7);
	SgCheckDedupWindow(spec->dedup_window);
	if (!signature_0_1)
		sg_create_settings(fcinfo, spec);
	spec->start_from = (SgStartFrom) SgParseWord(&SgStartFromWords, SgTextArg(fcinfo, 8, "start_from"));
	if (!PG_ARGISNULL(9))
		spec->source_server = text_to_cstring(PG_GETARG_TEXT_PP(9));
	if (!PG_ARGISNULL(10))
		spec->sink_server = text_to_cstring(PG_GETARG_TEXT_PP(10));
	if (!PG_ARGISNULL(11))
		spec->sink_table = text_to_cstring(PG_GETARG_TEXT_PP(11));
	spec->sink_mode = (SgSinkMode) SgParseWord(&SgSinkModeWords, SgTextArg(fcinfo, 12, "sink_mode"));
	if (!signature_0_1 && !PG_ARGISNULL(19))
	{
		spec->sink_on_conflict = PG_GETARG_ARRAYTYPE_P(19);
		if (spec->sink_server == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("sink_on_conflict needs a remote sink (sink_server and sink_table)")));
	}
}

/*
 * What the ends of a pipeline allow together, before anything is looked
 * up: the worker count, a sink's server and table, a Kafka sink's
 * guarantee and source, the names of a remote source.  A Kafka sink gets
 * its defaults here (batch size, sink mode); a table sink's name is
 * quoted.  *kafka_source and *kafka_sink say which ends are Kafka topics.
 */
void
PipelineCheckEnds(SgPipelineSpec *spec, bool *kafka_source, bool *kafka_sink)
{
	*kafka_source = false;
	*kafka_sink = false;
	PipelineCheckWorkersRemote(spec->workers, spec->source_server, spec->sink_server);
	if ((spec->sink_server == NULL) != (spec->sink_table == NULL))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("sink_server and sink_table go together")));
	if (spec->sink_server && KafkaIsKafkaServer(spec->sink_server))
	{
		/* a topic, not a table */
		*kafka_sink = true;
		KafkaCheckTopicName(spec->sink_table);

		/*
		 * A Kafka transaction costs several round trips to the broker:
		 * larger batches under a backlog (Kafka Streams commits its
		 * exactly-once transactions every 100 ms).  A batch never waits
		 * to fill, so a quiet stream's latency is the same.
		 */
		if (spec->batch_size < 0)
			spec->batch_size = SG_KAFKA_SINK_BATCH_SIZE;

		/*
		 * A stream, local or on a remote PostgreSQL server (the checkpoint
		 * then holds the remote positions); not a topic: Kafka to Kafka is
		 * not built.
		 */
		if (spec->source_server && KafkaIsKafkaServer(spec->source_server))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("a pipeline with a Kafka sink reads a stream, not a Kafka topic"),
					 errdetail("Servers \"%s\" and \"%s\" are both Kafka servers.",
							   spec->source_server, spec->sink_server),
					 errhint("Read the topic into a stream with one pipeline and write the stream to Kafka with another.")));
		if (spec->guarantee == SG_AT_MOST_ONCE)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("a pipeline with a Kafka sink is exactly_once or at_least_once")));
		if (spec->sink_on_conflict)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("sink_on_conflict does not apply to a Kafka sink")));
		/* the Kafka-side analogue of offsets: positions kept by the sink */
		spec->sink_mode = SG_SINK_OFFSETS;
	}
	else if (spec->sink_table)
		spec->sink_table = PipelineQuoteTable(spec->sink_table);
	if (spec->source_server)
	{
		/* the server's wrapper says what the source names: a topic or a stream */
		*kafka_source = KafkaIsKafkaServer(spec->source_server);
		if (*kafka_source)
			KafkaCheckTopicName(spec->source);
		else
			SgCheckName("stream", spec->source);
	}
}

/*
 * What the pipeline will touch, as the caller: the owner must be able to
 * read the source (a local stream, *meta, locked against a drop; or the
 * partitions of a remote one or a topic, *remote_nparts), the SQL must be
 * one that can run in a batch, and a sink must take what the SQL gives.
 * SPI connected.
 */
void
PipelineCheckAccess(const SgPipelineSpec *spec, bool kafka_source, bool kafka_sink, SgStreamMeta **meta,
					int *remote_nparts)
{
	*meta = NULL;
	*remote_nparts = 0;
	if (kafka_source)
		*remote_nparts = PipelineCheckKafkaSource(spec->source_server, spec->source);
	else if (spec->source_server)
		*remote_nparts = PipelineCheckRemoteSource(spec->source_server, spec->source);
	else
	{
		*meta = StreamLookup(spec->source, SG_PRIV_READ);
		StreamLockShare(*meta);
	}
	PipelineValidateSqlFor(spec->sql, kafka_source);
	if (kafka_sink)
	{
		KafkaSinkCheckShape(spec->sql);
		KafkaSinkCheck(spec->sink_server, spec->sink_table, spec->guarantee == SG_EXACTLY_ONCE);
	}
	else if (spec->sink_server)
	{
		char	   *cols = PipelineValidateSelect(spec->sql);

		PipelineCheckRemoteSink(spec->sink_server, spec->sink_table, cols, spec->sink_mode,
								spec->sink_on_conflict ?
								PipelineCheckSinkConflict(spec->sql, spec->sink_on_conflict) : NULL);
	}
}

/* ------------------------------------------------------- alter_pipeline */

/*
 * alter_pipeline's arguments, each checked on its own, in the order of
 * the signature: sql (checked in sg_alter), batch_size,
 * error_policy, then (0.2) batch_timeout, max_attempts, retry_backoff,
 * max_backoff, workers.  NULL keeps a setting.
 */
void
PipelineAlterArgs(FunctionCallInfo fcinfo, bool signature_0_1, SgPipelineChange *change)
{
	memset(change, 0, sizeof(*change));
	change->catalog_0_1 = signature_0_1;
	if (!PG_ARGISNULL(1))
		change->sql = text_to_cstring(PG_GETARG_TEXT_PP(1));
	change->set_batch_size = !PG_ARGISNULL(2);
	if (change->set_batch_size)
	{
		change->batch_size = PG_GETARG_INT32(2);
		PipelineCheckBatchSize(change->batch_size);
	}
	change->set_policy = !PG_ARGISNULL(3);
	if (change->set_policy)
		change->policy = (SgErrorPolicy) SgParseWord(&SgErrorPolicyWords, text_to_cstring(PG_GETARG_TEXT_PP(3)));
	if (signature_0_1)
		return;
	if (!PG_ARGISNULL(4))
	{
		change->batch_timeout = PG_GETARG_INTERVAL_P(4);
		PipelineCheckBatchTimeout(change->batch_timeout);
	}
	change->set_max_attempts = !PG_ARGISNULL(5);
	if (change->set_max_attempts)
		change->max_attempts = PG_GETARG_INT32(5);
	if (!PG_ARGISNULL(6))
		change->retry_backoff = PG_GETARG_INTERVAL_P(6);
	if (!PG_ARGISNULL(7))
		change->max_backoff = PG_GETARG_INTERVAL_P(7);
	change->set_workers = !PG_ARGISNULL(8);
	if (change->set_workers)
	{
		change->workers = PG_GETARG_INT32(8);
		PipelineCheckWorkers(change->workers);
	}

	/*
	 * The retry settings given, before the row's constraints see them (an
	 * absent one as a valid extreme); with the old ones after the change
	 * (sg_alter).
	 */
	{
		Interval   *shortest = palloc0(sizeof(Interval));
		Interval   *longest = palloc0(sizeof(Interval));

		shortest->time = 10 * 1000;
		longest->time = 3600 * USECS_PER_SEC;
		PipelineCheckRetry(change->set_max_attempts ? change->max_attempts : 1,
						   change->retry_backoff ? change->retry_backoff : shortest,
						   change->max_backoff ? change->max_backoff : longest);
	}
}

/*
 * A new SQL for pipeline `name`, checked as the caller, like
 * create_pipeline's: for the batch's columns (a Kafka source has two
 * more) and, with a Kafka sink, for the shape of its messages.  SPI
 * connected.
 */
void
PipelineCheckNewSql(const char *name, const char *sql)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};
	SgUserSave	save;
	bool		kafka;
	char	   *sink = NULL;

	SgBecomeDataOwner(&save, true);
	if (SPI_execute_with_args("SELECT source_kafka, sink_server FROM streamguard.pipeline WHERE name = $1",
							  1, types, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "pipeline lookup failed");
	kafka = SPI_processed == 1 &&
		strcmp(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
							SgColumn(SPI_tuptable->tupdesc, "source_kafka")), "t") == 0;
	if (SPI_processed == 1)
		sink = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
							SgColumn(SPI_tuptable->tupdesc, "sink_server"));
	SgRestoreUser(&save);
	PipelineValidateSqlFor(sql, kafka);
	if (sink && KafkaIsKafkaServer(sink))
		KafkaSinkCheckShape(sql);
}
