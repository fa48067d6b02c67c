/*-------------------------------------------------------------------------
 *
 * source_kafka.c
 *		A Kafka topic as a pipeline's source: reading a batch with a
 *		read_committed consumer and keeping the offsets in PostgreSQL.
 *
 * The positions are rows of streamguard.kafka_position, one per partition
 * of the topic: the next offset to read.  A batch's transaction locks them
 * (FOR UPDATE, after the fence of batch.c), reads the messages after them,
 * and writes the new offsets in the transaction that commits the batch's
 * effects: exactly once into PostgreSQL, whatever the consumer did before
 * a crash.  Kafka's consumer-group offsets are never used to resume.
 *
 * The consumer is assigned every partition of the topic by hand (no group
 * membership, no rebalance); only the worker that holds the pipeline's
 * epoch can commit positions, so a zombie that still reads commits
 * nothing.  The consumer lives across batches; it remembers where it
 * stands in each partition (pos[]), and when the stored positions differ
 * — the first batch, a batch that rolled back, a reset — it is assigned
 * again at the stored offsets, which drops whatever it had fetched ahead.
 * After an error the worker closes it (the routine's close): the next
 * batch opens a new one with the server's current options.  The consumer
 * and what it knows (SgKafkaSource) are this file's state.
 *
 * The topic's metadata is asked again every SG_KAFKA_METADATA_MS and after
 * the consumer reported an error: partitions added to the topic get
 * positions at their beginning in the batch that finds them.  A broker
 * that cannot be reached shows as an error after streamguard.remote_timeout
 * (a metadata request that gets no answer, or client errors without a
 * message in between for that long).
 *
 * The relation "batch" has the stream's six columns and two more, topic
 * and headers; a malformed message (not valid JSON text) meets the error
 * policy at once and the offsets move past it in the same transaction
 * (source_kafka_messages.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/dbcommands.h"
#include "common/jsonapi.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/compat.h"
#include "catalog/pipeline_catalog.h"
#include "io/kafka.h"
#include "pipeline/source_kafka.h"
#include "pipeline/worker.h"

/* metadata asked again this often (new partitions, a lost cluster) */
#define SG_KAFKA_METADATA_MS 10000
/* an empty batch waits this long for a first message */
#define SG_KAFKA_FIRST_WAIT_MS 50

typedef struct SgKafkaSource
{
	SgKafka    *client;
	int			nparts;			/* partitions with a position row */
	int			assigned;		/* partitions assigned to the consumer */
	int64	   *pos;			/* next offset the consumer delivers */
	int64	   *hw;				/* high watermarks last stored */
	int64	   *group;			/* offsets last committed to the group */
	TimestampTz metadata_at;	/* last metadata answer; 0: ask now */
	uint64		errors_seen;	/* client reports counted so far */
	TimestampTz failing_since;	/* no message since (0: not known yet) */
} SgKafkaSource;

static uint32 sg_we_fetch = 0;

static void
sg_kafka_status(SgWorker *w, bool connected, const char *error)
{
	PipelineSlotSetRemote(w->slot, SG_SIDE_SOURCE, w->def.source_server, connected, 0, error);
}

/* after a failed batch: the next one starts with a new consumer */
static void
sg_kafka_source_close(SgWorker *w)
{
	SgKafkaSource *s = (SgKafkaSource *) w->source_state;

	if (s == NULL)
		return;
	KafkaClose(s->client);
	s->client = NULL;
	s->assigned = 0;
	sg_kafka_status(w, false, NULL);
	s->metadata_at = 0;
	s->failing_since = 0;
}

static SgKafkaSource *
sg_source(SgWorker *w)
{
	SgKafkaSource *s = (SgKafkaSource *) w->source_state;

	if (s == NULL)
	{
		s = MemoryContextAllocZero(TopMemoryContext, sizeof(SgKafkaSource));
		w->source_state = s;
		if (sg_we_fetch == 0)
			sg_we_fetch = SG_WAIT_EVENT("StreamguardKafkaFetch", 5);
	}
	if (s->client == NULL)
	{
		PG_TRY();
		{
			/* as the owner: its USAGE on the server, its user mapping */
			s->client = KafkaConsumerOpen(w->def.source_server, w->def.owner,
										  psprintf("streamguard-%s-%s", get_database_name(MyDatabaseId),
												   w->def.name));
		}
		PG_CATCH();
		{
			sg_kafka_status(w, false, "could not create the Kafka client");
			PG_RE_THROW();
		}
		PG_END_TRY();
		s->errors_seen = KafkaErrorCount(s->client);
		s->assigned = 0;
	}
	return s;
}

static void
sg_grow(SgKafkaSource *s, int n)
{
	int64	   *pos = MemoryContextAlloc(TopMemoryContext, sizeof(int64) * n);
	int64	   *hw = MemoryContextAlloc(TopMemoryContext, sizeof(int64) * n);
	int64	   *group = MemoryContextAlloc(TopMemoryContext, sizeof(int64) * n);
	int			p;

	for (p = 0; p < n; p++)
	{
		pos[p] = p < s->nparts ? s->pos[p] : -3;
		hw[p] = p < s->nparts ? s->hw[p] : -1;
		group[p] = p < s->nparts ? s->group[p] : -1;
	}
	if (s->pos)
	{
		pfree(s->pos);
		pfree(s->hw);
		pfree(s->group);
	}
	s->pos = pos;
	s->hw = hw;
	s->group = group;
	s->nparts = n;
}

/*
 * The partitions of the batch about to run (in its transaction, after
 * the fence): the stored positions, and the topic's partitions when the
 * metadata is due — new ones get positions at their beginning here.
 */
static int
sg_kafka_partitions(SgWorker *w)
{
	SgKafkaSource *s = sg_source(w);
	Oid			types[2] = {INT4OID, INT4OID};
	Datum		values[2];
	SgUserSave	save;
	int			stored;
	bool		isnull;

	values[0] = Int32GetDatum(w->def.id);
	SgBecomeDataOwner(&save, false);
	if (SPI_execute_with_args("SELECT pg_catalog.count(*)::int4 FROM streamguard.kafka_position "
							  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1",
							  1, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "kafka position lookup failed");
	stored = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	SgRestoreUser(&save);

	if (s->metadata_at == 0 ||
		TimestampDifferenceExceeds(s->metadata_at, GetCurrentTimestamp(), SG_KAFKA_METADATA_MS))
	{
		int			n;

		PG_TRY();
		{
			n = KafkaTopicPartitions(s->client, w->def.remote_stream, KafkaDeadline());
		}
		PG_CATCH();
		{
			char		last[256];

			KafkaLastError(s->client, last, sizeof(last));
			sg_kafka_status(w, false, last[0] ? last : "no metadata");
			PG_RE_THROW();
		}
		PG_END_TRY();
		s->metadata_at = GetCurrentTimestamp();
		sg_kafka_status(w, true, NULL);
		if (n > stored)
		{
			/* new partitions: everything in them is new */
			SgBecomeDataOwner(&save, false);
			KafkaPositionsAdd(w->def.id, n, -2);
			SgRestoreUser(&save);
			if (stored > 0)
				ereport(LOG,
						(errmsg("streamguard pipeline \"%s\": topic \"%s\" has %d partitions now (was %d)",
								w->def.name, w->def.remote_stream, n, stored)));
			stored = n;
		}
	}
	if (stored != s->nparts)
		sg_grow(s, stored);
	return stored;
}

/* store positions (and high watermarks) of partitions that moved */
static void
sg_store_positions(SgWorker *w, int64 *next, int64 *hw, int nparts)
{
	Oid			types[3] = {INT4OID, INT8ARRAYOID, INT8ARRAYOID};
	Datum		values[3];
	Datum	   *e1 = palloc(sizeof(Datum) * nparts);
	Datum	   *e2 = palloc(sizeof(Datum) * nparts);
	SgUserSave	save;
	int			p;

	for (p = 0; p < nparts; p++)
	{
		e1[p] = Int64GetDatum(next[p]);
		e2[p] = Int64GetDatum(hw[p]);
	}
	values[0] = Int32GetDatum(w->def.id);
	values[1] = PointerGetDatum(construct_array(e1, nparts, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[2] = PointerGetDatum(construct_array(e2, nparts, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	SgBecomeDataOwner(&save, false);
	if (SPI_execute_with_args("UPDATE streamguard.kafka_position "
							  "SET next_offset = GREATEST(next_offset, ($2)[partition OPERATOR(pg_catalog.+) 1]), "
							  "high_watermark = CASE WHEN ($3)[partition OPERATOR(pg_catalog.+) 1] OPERATOR(pg_catalog.>=) 0 "
							  "THEN ($3)[partition OPERATOR(pg_catalog.+) 1] ELSE high_watermark END, "
							  "updated_at = pg_catalog.now() "
							  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1 "
							  "AND (($2)[partition OPERATOR(pg_catalog.+) 1] OPERATOR(pg_catalog.>) next_offset "
							  "OR ($3)[partition OPERATOR(pg_catalog.+) 1] IS DISTINCT FROM high_watermark "
							  "AND ($3)[partition OPERATOR(pg_catalog.+) 1] OPERATOR(pg_catalog.>=) 0)",
							  3, types, values, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "kafka position update failed");
	SgRestoreUser(&save);
}

/*
 * Move the positions past `last` (next offsets; a partition the batch did
 * not read keeps its stored position).
 */
static void
sg_move_positions(SgWorker *w, int64 *last, int nparts)
{
	SgKafkaSource *s = (SgKafkaSource *) w->source_state;
	int64	   *hw = palloc(sizeof(int64) * nparts);
	int			p;

	for (p = 0; p < nparts; p++)
	{
		hw[p] = -1;
		if (s && s->client && p < s->nparts &&
			KafkaWatermark(s->client, w->def.remote_stream, p, &hw[p]))
			s->hw[p] = hw[p];
	}
	sg_store_positions(w, last, hw, nparts);
}

/* consumer errors that no retry repairs */
static bool
sg_fatal(rd_kafka_resp_err_t err)
{
	switch (err)
	{
		case RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE:
		case RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET:
		case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
		case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
		case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
		case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
		case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
		case RD_KAFKA_RESP_ERR__AUTHENTICATION:
		case RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED:
		case RD_KAFKA_RESP_ERR__FATAL:
			return true;
		default:
			return false;
	}
}

/*
 * No message for streamguard.remote_timeout: is there something to read?
 * Client errors make the next batch ask the cluster for metadata (which
 * fails after streamguard.remote_timeout when no broker answers).  And
 * when the partitions hold messages after our positions that do not come
 * (a message larger than the client may receive, a broker that answers
 * metadata but not fetches), the batch fails with what the client last
 * reported, so that the views say why nothing arrives.  An idle topic
 * costs one end-offset request per partition per streamguard.remote_timeout.
 */
static void
sg_check_stall(SgWorker *w, SgKafkaSource *s, bool got_message, int64 *next, int nparts)
{
	uint64		count = KafkaErrorCount(s->client);
	TimestampTz now = GetCurrentTimestamp();
	char		last[256];
	int			p;

	if (count != s->errors_seen)
	{
		s->errors_seen = count;
		s->metadata_at = 0;		/* ask the cluster at the next batch */
		if (!got_message)
		{
			KafkaLastError(s->client, last, sizeof(last));
			sg_kafka_status(w, false, last);
		}
	}
	if (got_message || s->failing_since == 0)
	{
		s->failing_since = now;
		if (got_message)
			sg_kafka_status(w, true, NULL);
		return;
	}
	if (!TimestampDifferenceExceeds(s->failing_since, now, sg_remote_timeout_ms))
		return;
	for (p = 0; p < nparts; p++)
	{
		int64		start;
		int64		end = KafkaPartitionEnd(s->client, w->def.remote_stream, p, KafkaDeadline(), &start);

		if (end > Max(next[p], start))
		{
			KafkaLastError(s->client, last, sizeof(last));
			sg_kafka_status(w, false, last[0] ? last : "no progress");
			KafkaRaise(s->client, RD_KAFKA_RESP_ERR__TRANSPORT,
					   psprintf("no message from topic \"%s\" within streamguard.remote_timeout (%d ms) although partition %d has messages from offset %lld to %lld (client: %s)",
								w->def.remote_stream, sg_remote_timeout_ms, p,
								(long long) Max(next[p], start), (long long) end, last[0] ? last : "no report"));
		}
	}
	s->failing_since = now;		/* nothing to read: idle, not stalled */
}

/*
 * The stored positions of the batch's partitions, locked for this
 * transaction (-2: no row); a position start_from 'end' left to settle is
 * settled now, at the end as of the first batch.
 */
static int64 *
sg_lock_positions(SgWorker *w, SgKafkaSource *s, int nparts)
{
	int64	   *stored = palloc(sizeof(int64) * Max(nparts, 1));
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(w->def.id)};
	SgUserSave	save;
	uint64		i;
	int			p;

	SgBecomeDataOwner(&save, false);
	if (SPI_execute_with_args("SELECT partition, next_offset FROM streamguard.kafka_position "
							  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1 FOR UPDATE",
							  1, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "kafka position lookup failed");
	for (p = 0; p < nparts; p++)
		stored[p] = -2;
	for (i = 0; i < SPI_processed; i++) /* bounded: a row per partition */
	{
		bool		isnull;
		int			part = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));

		if (part >= 0 && part < nparts)
			stored[part] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
	}
	SgRestoreUser(&save);

	/* start_from 'end', settled once: the end as of the first batch */
	for (p = 0; p < nparts; p++)
		if (stored[p] == -1)
		{
			int64	   *next = palloc(sizeof(int64) * nparts);
			int64	   *hw = palloc(sizeof(int64) * nparts);
			int			q;

			for (q = 0; q < nparts; q++)
			{
				next[q] = -2;
				hw[q] = -1;
			}
			stored[p] = next[p] = KafkaPartitionEnd(s->client, w->def.remote_stream, p, KafkaDeadline(), NULL);
			sg_store_positions(w, next, hw, nparts);
		}
	return stored;
}

/*
 * The consumer where the stored positions say, before it reads: the
 * group's offsets told, then a new assignment, seeks, or the partitions
 * added to the topic.
 */
static void
sg_place_consumer(SgWorker *w, SgKafkaSource *s, int64 *stored, int nparts)
{
	int			p;

	/*
	 * The group's offsets, a courtesy for Kafka-side tools: what an earlier
	 * transaction committed here, never ahead of it.
	 */
	for (p = 0; p < nparts; p++)
		if (stored[p] >= 0 && stored[p] != s->group[p])
		{
			KafkaCommitGroupOffsets(s->client, w->def.remote_stream, nparts, stored);
			memcpy(s->group, stored, sizeof(int64) * nparts);
			break;
		}

	/*
	 * A new consumer is assigned every partition at the stored positions.
	 * A consumer that holds an assignment never gets one again for the
	 * partitions it holds: librdkafka 2.0.2 aborts the process on an
	 * assertion when a partition is assigned again while its earlier
	 * assignment is still being stopped.  Partitions added to the topic
	 * are added to its assignment (incrementally), and a partition whose
	 * stored position is not where the consumer stands is moved there by
	 * a seek (see KafkaSeek).
	 */
	if (s->assigned == 0 || s->assigned > nparts)
	{
		SgKafkaStart *starts = palloc(sizeof(SgKafkaStart) * Max(nparts, 1));

		for (p = 0; p < nparts; p++)
		{
			starts[p].partition = p;
			starts[p].offset = stored[p] >= 0 ? stored[p] : RD_KAFKA_OFFSET_BEGINNING;
			s->pos[p] = stored[p];
		}
		/* not assigned until it succeeded: a failure assigns again */
		s->assigned = 0;
		KafkaAssign(s->client, w->def.remote_stream, starts, nparts);
		s->assigned = nparts;
	}
	else
	{
		SgKafkaStart *starts = palloc(sizeof(SgKafkaStart) * Max(nparts, 1));
		int			held = s->assigned;
		int			nseek = 0;

		for (p = 0; p < held; p++)
			if (stored[p] != s->pos[p])
			{
				starts[nseek].partition = p;
				starts[nseek].offset = stored[p] >= 0 ? stored[p] : RD_KAFKA_OFFSET_BEGINNING;
				nseek++;
			}
		if (nseek > 0)
		{
			/* not known until the seek succeeded (a failure closes the consumer) */
			for (p = 0; p < nseek; p++)
				s->pos[starts[p].partition] = -3;
			KafkaSeek(s->client, w->def.remote_stream, starts, nseek, KafkaDeadline());
			for (p = 0; p < nseek; p++)
				s->pos[starts[p].partition] = stored[starts[p].partition];
		}
		if (held < nparts)
		{
			for (p = held; p < nparts; p++)
			{
				starts[p - held].partition = p;
				starts[p - held].offset = stored[p] >= 0 ? stored[p] : RD_KAFKA_OFFSET_BEGINNING;
				s->pos[p] = stored[p];
			}
			KafkaAssignMore(s->client, w->def.remote_stream, starts, nparts - held);
			s->assigned = nparts;
		}
	}
}

/*
 * Poll up to batch_size messages into `store` (waiting a little for the
 * first); first/last as sg_kafka_source_fetch returns them.  Returns the rows put
 * into `store` (*consumed: the malformed messages the error policy took),
 * or -1 when the error policy stops the pipeline (w->stop_error).
 */
static int
sg_poll_messages(SgWorker *w, SgKafkaSource *s, Tuplestorestate *store, int64 *first, int64 *last,
				 int nparts, int *consumed)
{
	int			rows = 0;
	int			p;
	TimestampTz wait_until;

	pgstat_report_activity(STATE_RUNNING, "fetch from Kafka");
	wait_until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), SG_KAFKA_FIRST_WAIT_MS);
	while (rows + *consumed < w->def.batch_size)
	{
		long		wait_ms = 0;
		rd_kafka_message_t *m;
		int			put;

		CHECK_FOR_INTERRUPTS();

		if (rows + *consumed == 0)
			wait_ms = Max((long) ((wait_until - GetCurrentTimestamp()) / 1000), 0);
		m = KafkaPoll(s->client, wait_ms, sg_we_fetch);
		if (m == NULL)
			break;
		if (m->err)
		{
			rd_kafka_resp_err_t err = m->err;

			if (err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
				continue;
			if (sg_fatal(err))
			{
				char	   *what = m->rkt ?
					psprintf("partition %d of topic \"%s\"", (int) m->partition, rd_kafka_topic_name(m->rkt)) :
					pstrdup("consumer");

				if (err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART || err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC)
					s->metadata_at = 0;
				sg_kafka_status(w, false, rd_kafka_err2str(err));
				KafkaRaise(s->client, err, what);
			}
			/* the client retries on its own; noticed by sg_check_stall */
			continue;
		}
		p = m->partition;
		if (m->rkt == NULL || strcmp(rd_kafka_topic_name(m->rkt), w->def.remote_stream) != 0 ||
			p < 0 || p >= nparts || (s->pos[p] >= 0 && m->offset < s->pos[p]))
			continue;			/* not ours, or before our position */
		put = KafkaSourcePutMessage(w, m, store);
		if (put < 0)
			return -1;
		if (put > 0)
			rows++;
		else
			(*consumed)++;
		if (first[p] == 0)
			first[p] = m->offset + 1;
		last[p] = m->offset + 1;
		s->pos[p] = m->offset + 1;
		KafkaMessageDone(s->client);
	}
	return rows;
}

/*
 * Read up to batch_size messages after the stored positions (locked for
 * this transaction) into the batch; first/last get each partition's first
 * and last offset read, plus one (first 0: none; last is then the next
 * offset to read).  With b->advance — or when every message read was
 * malformed and taken by the error policy — the positions move in this
 * transaction.  Returns the rows put into the batch, or -1 when the error
 * policy stops the pipeline (w->stop_error).
 */
static int
sg_kafka_source_fetch(SgWorker *w, SgBatch *b)
{
	SgKafkaSource *s = sg_source(w);
	int			nparts = s->nparts;
	int64	   *first = b->first;
	int64	   *last = b->last;
	int64	   *stored;
	int			p;
	int			rows;
	int			consumed = 0;
	bool		moved = false;

	stored = sg_lock_positions(w, s, nparts);
	sg_place_consumer(w, s, stored, nparts);
	for (p = 0; p < nparts; p++)
	{
		first[p] = 0;
		last[p] = stored[p];
	}
	rows = sg_poll_messages(w, s, b->store, first, last, nparts, &consumed);
	if (rows < 0)
		return -1;

	/*
	 * Past what a read_committed reader never sees (transaction markers,
	 * aborted messages): the consumer's position, once it returned every
	 * message before it.
	 */
	{
		int64	   *cpos = palloc(sizeof(int64) * Max(nparts, 1));

		KafkaPositions(s->client, w->def.remote_stream, nparts, cpos);
		for (p = 0; p < nparts; p++)
			if (cpos[p] >= 0 && s->pos[p] >= 0 && cpos[p] > s->pos[p])
			{
				last[p] = s->pos[p] = cpos[p];
				moved = true;
			}
	}
	sg_check_stall(w, s, rows + consumed > 0, last, nparts);

	if ((rows > 0 && b->advance) || (rows == 0 && (consumed > 0 || moved)))
		sg_move_positions(w, last, nparts);
	else if (rows == 0)
	{
		int64	   *hw = palloc(sizeof(int64) * Max(nparts, 1));
		bool		changed = false;

		/* an idle topic: the lag view still follows the high watermarks */
		for (p = 0; p < nparts; p++)
		{
			hw[p] = -1;
			if (KafkaWatermark(s->client, w->def.remote_stream, p, &hw[p]) && hw[p] != s->hw[p])
			{
				changed = true;
				s->hw[p] = hw[p];
			}
			else
				hw[p] = -1;
		}
		if (changed)
			sg_store_positions(w, last, hw, nparts);
	}
	return rows;
}

/* ------------------------------------------------------------ routine */

/* the columns of relation "batch": the stream's six, topic and headers */
static void
sg_kafka_source_open(SgWorker *w)
{
	MemoryContext old;

	WorkerBegin("start");
	old = MemoryContextSwitchTo(TopMemoryContext);
	w->event_desc = KafkaEventTupleDesc();
	MemoryContextSwitchTo(old);
	WorkerCommit();
}

/* the batch's partitions: the stored positions, new ones added (above) */
static bool
sg_kafka_source_begin(SgWorker *w, SgBatch *b)
{
	b->nparts = sg_kafka_partitions(w);
	return true;
}

/*
 * The stored positions (next offsets) as this transaction sees them (-1:
 * none; -2: from the beginning, not settled).
 */
static void
sg_kafka_source_positions(SgWorker *w, SgBatch *b, int64 *pos, int nparts)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(w->def.id)};

	SgLoadPositions("SELECT partition, next_offset FROM streamguard.kafka_position "
					"WHERE pipeline_id OPERATOR(pg_catalog.=) $1",
					1, types, values, pos, nparts);
}

/* move the positions past `to` (at_least_once, after the effects committed) */
static void
sg_kafka_source_advance(SgWorker *w, SgBatch *b, int64 *to, int nparts)
{
	sg_move_positions(w, to, nparts);
}

const SgSourceRoutine SgKafkaSourceRoutine = {
	.name = "Kafka topic",
	.idle_ms = 100,				/* nothing wakes us: poll the consumer */
	.local_events = false,
	.open = sg_kafka_source_open,
	.begin = sg_kafka_source_begin,
	.fetch = sg_kafka_source_fetch,
	.positions = sg_kafka_source_positions,
	.advance = sg_kafka_source_advance,
	.close = sg_kafka_source_close,
};
