/*-------------------------------------------------------------------------
 *
 * seek.c
 *		Moving and dropping consumers: seek(), seek_time(), drop_consumer(),
 *		and the same for pipelines (reset_pipeline) through ConsumerSeekSeq
 *		and ConsumerSeekTime; seq_at_time() for readers without a consumer.
 *
 * A seek writes the consumer's position rows in the caller's transaction,
 * creating the rows of every partition first so that a consumer is never
 * half-created.  By time, every partition is positioned at its first
 * retained event appended at or after the given time, searched below the
 * readable horizon (see ConsumerSeekTime).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "catalog/sg_catalog.h"
#include "core/util.h"
#include "shmem/horizon.h"
#include "stream/group.h"
#include "stream/seek.h"

PG_FUNCTION_INFO_V1(sg_seek);
PG_FUNCTION_INFO_V1(sg_seek_time);
PG_FUNCTION_INFO_V1(sg_drop_consumer);
PG_FUNCTION_INFO_V1(sg_seq_at_time);

static void
sg_set_position(SgStreamMeta *meta, const char *consumer, int partition, int64 position)
{
	Oid			types[4] = {INT4OID, TEXTOID, INT4OID, INT8OID};
	Datum		values[4];
	int			ret;

	values[0] = Int32GetDatum(meta->stream_id);
	values[1] = CStringGetTextDatum(consumer);
	values[2] = Int32GetDatum(partition);
	values[3] = Int64GetDatum(position);
	ret = SPI_execute_with_args("INSERT INTO streamguard.consumer AS c (stream_id, name, partition, position) "
								"VALUES ($1, $2, $3, $4) "
								"ON CONFLICT (stream_id, name, partition) DO UPDATE SET "
								"position = excluded.position, updated_at = pg_catalog.now()",
								4, types, values, NULL, false, 0);
	if (ret != SPI_OK_INSERT)
		elog(ERROR, "seek failed: %s", SPI_result_code_string(ret));
}

/*
 * Make sure every partition has a position row, so that a seek of one
 * partition does not leave the consumer half-created.
 */
static void
sg_seek_prepare(SgStreamMeta *meta, const char *consumer)
{
	Oid			types[2] = {INT4OID, TEXTOID};
	Datum		values[2];
	int			ret;

	StreamLockShare(meta);
	values[0] = Int32GetDatum(meta->stream_id);
	values[1] = CStringGetTextDatum(consumer);
	ret = SPI_execute_with_args("INSERT INTO streamguard.consumer (stream_id, name, partition, position) "
								"SELECT $1, $2, sp.partition, sp.seq_floor FROM streamguard.stream_partition sp "
								"WHERE sp.stream_id OPERATOR(pg_catalog.=) $1 ON CONFLICT DO NOTHING",
								2, types, values, NULL, false, 0);
	if (ret != SPI_OK_INSERT)
		elog(ERROR, "consumer creation failed: %s", SPI_result_code_string(ret));
}

/*
 * Position a consumer so that its next read of `partition` (every
 * partition when partition < 0) starts at seq.  seq 0 means the beginning
 * of the retained stream.  Runs as the data owner, SPI connected.
 */
void
ConsumerSeekSeq(SgStreamMeta *meta, const char *consumer, int partition, int64 seq)
{
	int			p;

	StreamEnsureSeqReady(meta->ref, meta->stream_id);
	sg_seek_prepare(meta, consumer);
	for (p = 0; p < meta->nparts; p++)
	{
		int64		next_seq;

		if (partition >= 0 && p != partition)
			continue;
		(void) HorizonReadable(meta->ref.slot, p, &next_seq, NULL);
		if (seq < 0 || seq > next_seq)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("seq %lld is out of range for partition %d of stream \"%s\"",
							(long long) seq, p, meta->name),
					 errdetail("Valid seqs are 1 to %lld.", (long long) next_seq)));
		sg_set_position(meta, consumer, p, seq > 0 ? seq - 1 : 0);
	}
}

/*
 * The first retained seq of `partition` appended at or after `from`, below
 * the readable horizon; the horizon itself when there is none.  The events
 * are searched with a snapshot taken after the horizon was read, like a
 * poll, whatever the caller's snapshot: every event below the horizon is
 * then visible, and one at or above it may still commit, so the answer
 * never goes past the horizon.  Events at or above it may be older than
 * `from`; none at or after `from` is ever below the answer.  Runs as the
 * data owner, SPI connected.
 */
static int64
sg_seq_for_time(SgStreamMeta *meta, int partition, TimestampTz from, int32 min_seg, int32 cur_seg)
{
	int64		horizon = HorizonReadable(meta->ref.slot, partition, NULL, NULL);
	int64		target = -1;
	Snapshot	snap = SgFreshSnapshot();
	Oid			types[3] = {INT4OID, TIMESTAMPTZOID, INT8OID};
	Datum		values[3] = {Int32GetDatum(partition), TimestampTzGetDatum(from), Int64GetDatum(horizon)};
	Datum		d;

	if (StreamSegmentProbe(meta->stream_id, min_seg, cur_seg,
						   "SELECT pg_catalog.min(seq) FROM %s WHERE partition OPERATOR(pg_catalog.=) $1 "
						   "AND appended_at OPERATOR(pg_catalog.>=) $2 AND seq OPERATOR(pg_catalog.<) $3",
						   3, types, values, snap, &d))
		target = DatumGetInt64(d);
	UnregisterSnapshot(snap);
	return target < 0 ? horizon : target;
}

/*
 * Position a consumer, in every partition, at the first retained event
 * appended at or after `from` (sg_seq_for_time).
 */
void
ConsumerSeekTime(SgStreamMeta *meta, const char *consumer, TimestampTz from)
{
	int			p;
	int32		min_seg,
				cur_seg;

	StreamEnsureSeqReady(meta->ref, meta->stream_id);
	StreamSegmentRange(meta, &min_seg, &cur_seg);
	sg_seek_prepare(meta, consumer);
	for (p = 0; p < meta->nparts; p++)
		sg_set_position(meta, consumer, p, sg_seq_for_time(meta, p, from, min_seg, cur_seg) - 1);
}

/*
 * seek(stream, consumer, partition, seq): the next poll of the partition
 * returns events with seq >= seq.
 */
Datum
sg_seek(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *consumer;
	int32		partition;
	int64		seq;
	SgStreamMeta *meta;
	SgUserSave	save;

	SgCheckWritable("seek", "it moves the consumer's position");
	SgConsumerArgs(fcinfo, "seek", &name, &consumer);
	if (PG_ARGISNULL(2) || PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be NULL", PG_ARGISNULL(2) ? "partition" : "seq")));
	partition = PG_GETARG_INT32(2);
	seq = PG_GETARG_INT64(3);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	meta = StreamLookup(name, SG_PRIV_READ);
	StreamCheckPartition(meta, partition);
	if (seq < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("seq %lld is out of range for partition %d of stream \"%s\"",
						(long long) seq, partition, name),
				 errdetail("Seqs start at 1.")));
	SgBecomeDataOwner(&save, true);
	ConsumerSeekSeq(meta, consumer, partition, seq);
	SgLeaveCatalog(&save);
	PG_RETURN_VOID();
}

/*
 * seek(stream, consumer, from_time): every partition restarts at its first
 * retained event appended at or after from_time.
 */
Datum
sg_seek_time(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *consumer;
	TimestampTz from;
	SgStreamMeta *meta;
	SgUserSave	save;

	SgCheckWritable("seek", "it moves the consumer's position");
	SgConsumerArgs(fcinfo, "seek", &name, &consumer);
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("from_time must not be NULL")));
	from = PG_GETARG_TIMESTAMPTZ(2);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	meta = StreamLookup(name, SG_PRIV_READ);
	SgBecomeDataOwner(&save, true);
	ConsumerSeekTime(meta, consumer, from);
	SgLeaveCatalog(&save);
	PG_RETURN_VOID();
}

/*
 * seq_at_time(stream, partition, at) -> bigint
 *
 * Where a reader without a consumer (read()) starts to get the events of
 * `partition` appended at or after `at`: the first such retained seq below
 * the readable horizon, or the horizon when none is there yet.  Kafka's
 * offsetsForTimes.
 */
Datum
sg_seq_at_time(PG_FUNCTION_ARGS)
{
	char	   *name;
	int32		partition;
	TimestampTz at;
	SgStreamMeta *meta;
	SgUserSave	save;
	int32		min_seg,
				cur_seg;
	int64		seq;

	StreamguardCheckLoaded();
	SgCheckPrimary("seq_at_time");
	name = SgTextArg(fcinfo, 0, "stream name");
	if (PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be NULL", PG_ARGISNULL(1) ? "partition" : "at")));
	partition = PG_GETARG_INT32(1);
	at = PG_GETARG_TIMESTAMPTZ(2);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	meta = StreamLookup(name, SG_PRIV_READ);
	StreamCheckPartition(meta, partition);
	StreamEnsureSeqReady(meta->ref, meta->stream_id);
	StreamSegmentRange(meta, &min_seg, &cur_seg);
	SgBecomeDataOwner(&save, false);
	seq = sg_seq_for_time(meta, partition, at, min_seg, cur_seg);
	SgRestoreUser(&save);
	SPI_finish();
	PG_RETURN_INT64(seq);
}

/*
 * drop_consumer(stream, consumer)
 */
Datum
sg_drop_consumer(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *consumer;
	SgStreamMeta *meta;
	SgUserSave	save;
	Oid			types[2] = {INT4OID, TEXTOID};
	Datum		values[2];
	int			ret;

	SgCheckWritable("drop_consumer", "it drops the consumer's positions");
	SgConsumerArgs(fcinfo, NULL, &name, &consumer);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	meta = StreamLookup(name, SG_PRIV_READ);
	SgBecomeDataOwner(&save, true);
	values[0] = Int32GetDatum(meta->stream_id);
	values[1] = CStringGetTextDatum(consumer);
	ret = SPI_execute_with_args("DELETE FROM streamguard.consumer WHERE stream_id OPERATOR(pg_catalog.=) $1 "
								"AND name OPERATOR(pg_catalog.=) $2",
								2, types, values, NULL, false, 0);
	if (ret != SPI_OK_DELETE)
		elog(ERROR, "drop_consumer failed: %s", SPI_result_code_string(ret));
	if (SPI_processed == 0)
	{
		SgRestoreUser(&save);
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("consumer \"%s\" of stream \"%s\" does not exist", consumer, name)));
	}
	GroupForget(meta, consumer);
	SgLeaveCatalog(&save);
	PG_RETURN_VOID();
}
