/*-------------------------------------------------------------------------
 *
 * source_remote.c
 *		A stream on another streamguard server as a pipeline's source.
 *
 * The stream is read with streamguard.read() over libpq after the
 * positions kept here in streamguard.remote_position, locked for the
 * batch's transaction, and those positions move in the transaction that
 * commits the batch's effects (or, for at_least_once, in the one after).
 * With several workers each reads, locks and moves only the partitions it
 * owns (p % workers = worker), like a local source's consumer rows; a
 * partition that moves to another worker (alter_pipeline) carries its
 * position row.  The read of a full batch's successor is sent ahead
 * (sg_remote_fetch).
 *
 * The state between batches (SgRemoteSource): the connection, the read's
 * statement, the read sent ahead and the loss the last fetch found.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "pgstat.h"
#include "port/pg_bswap.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "pipeline/worker.h"

typedef struct SgRemoteSource
{
	SgRemote	remote;			/* the source server */
	uint32		rotor;			/* partition read first */
	char	   *read_sql;		/* the read (sg_remote_read_sql) */
	uint64		read_ahead;		/* ticket of the next batch's read, sent
								 * ahead (0: none) ... */
	int64	   *read_ahead_pos; /* ... from these positions ... */
	uint32		read_ahead_rotor;	/* ... with this rotor */
	int64	   *lost;			/* seqs retention removed ahead of each
								 * position, found by the last fetch */
} SgRemoteSource;

static void sg_remote_source_advance(SgWorker *w, SgBatch *b, int64 *to, int nparts);

/* store a remote source position (start_from 'end' settled) */
static void
sg_set_remote_position(SgWorker *w, int partition, int64 position)
{
	Oid			types[3] = {INT4OID, INT4OID, INT8OID};
	Datum		values[3] = {Int32GetDatum(w->def.id), Int32GetDatum(partition), Int64GetDatum(position)};
	SgUserSave	save;

	SgBecomeDataOwner(&save, false);
	if (SPI_execute_with_args("UPDATE streamguard.remote_position SET position = $3, updated_at = pg_catalog.now() "
							  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1 AND partition OPERATOR(pg_catalog.=) $2",
							  3, types, values, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "remote position update failed");
	SgRestoreUser(&save);
}

/*
 * A remote partition read from `pos` whose first event is `first`: how many
 * of the seqs between them the remote's retention removed before we read
 * them (its seq floor, the highest seq retention dropped).  The remote
 * cannot count the events it no longer has, so this counts seqs: a seq
 * that was never committed (an append rolled back) below the floor counts
 * too, where a local consumer's lost_events counts events.  A gap above
 * the floor is rolled-back appends, not loss.  A remote without the
 * seq_floor column (an older streamguard) reports no loss.
 */
static int64
sg_remote_lost(SgWorker *w, SgRemote *r, int p, int64 pos, int64 first)
{
	const char *params[2];
	SgRemoteResult *res;
	int64		floor_seq = 0;

	params[0] = w->def.remote_stream;
	params[1] = psprintf("%d", p);
	res = RemoteExec(r, "SELECT (pg_catalog.to_jsonb(sp) OPERATOR(pg_catalog.->>) 'seq_floor')::pg_catalog.int8 "
					 "FROM streamguard.stream_partitions sp WHERE sp.stream OPERATOR(pg_catalog.=) $1 "
					 "AND sp.partition OPERATOR(pg_catalog.=) $2::pg_catalog.int4", 2, params);
	if (RemoteNTuples(res) == 1 && !RemoteGetIsNull(res, 0, 0))
		floor_seq = strtoll(RemoteGetValue(res, 0, 0), NULL, 10);
	RemoteClear(res);
	return Max(Min(floor_seq, first - 1) - pos, 0);
}

/* whether remote partition p is this worker's */
static bool
sg_remote_owns(SgWorker *w, int p)
{
	return w->def.nworkers <= 1 || p % w->def.nworkers == w->def.worker;
}

/* how many of the remote partitions are this worker's */
static int
sg_remote_nowned(SgWorker *w)
{
	int			n = 0;
	int			p;

	for (p = 0; p < w->def.remote_nparts; p++)
		if (sg_remote_owns(w, p))
			n++;
	return n;
}

/*
 * The statement that reads a batch from the remote stream: streamguard.read
 * of every partition of the worker's, one after the other (UNION ALL runs
 * its branches in order, and the LIMIT stops before the partitions a full
 * batch does not reach), in one round trip.  $1 the stream, $2 the batch
 * size, then a partition and its position per branch, in the order to read
 * them.  Built once per worker.
 */
static const char *
sg_remote_read_sql(SgWorker *w, SgRemoteSource *s)
{
	StringInfoData sql;
	int			k;

	if (s->read_sql)
		return s->read_sql;
	initStringInfo(&sql);
	appendStringInfoString(&sql, "SELECT partition, seq, key, payload, dedup_key, appended_at FROM (");
	for (k = 0; k < sg_remote_nowned(w); k++)
		appendStringInfo(&sql, "%sSELECT * FROM streamguard.read($1, $%d::pg_catalog.int4, "
						 "$%d::pg_catalog.int8, $2::pg_catalog.int4)",
						 k ? " UNION ALL " : "", 3 + 2 * k, 4 + 2 * k);
	appendStringInfoString(&sql, ") r LIMIT $2::pg_catalog.int4");
	s->read_sql = MemoryContextStrdup(TopMemoryContext, sql.data);
	pfree(sql.data);
	return s->read_sql;
}

/*
 * parameters of sg_remote_read_sql: the worker's partitions from `rotor`
 * on, at `pos`
 */
static const char **
sg_remote_read_params(SgWorker *w, const int64 *pos, uint32 rotor)
{
	int			nparts = w->def.remote_nparts;
	const char **params = palloc(sizeof(char *) * (2 + 2 * nparts));
	int			k;
	int			b = 0;

	params[0] = w->def.remote_stream;
	params[1] = psprintf("%d", w->def.batch_size);
	for (k = 0; k < nparts; k++)
	{
		int			p = (int) ((rotor + k) % (uint32) nparts);

		if (!sg_remote_owns(w, p))
			continue;
		params[2 + 2 * b] = psprintf("%d", p);
		params[3 + 2 * b] = psprintf("%lld", (long long) pos[p]);
		b++;
	}
	return params;
}

/* the number of parameters of sg_remote_read_sql */
static int
sg_remote_read_nparams(SgWorker *w)
{
	return 2 + 2 * sg_remote_nowned(w);
}

/* a binary integer column of the read's result, its length checked */
static int64
sg_remote_int(SgRemoteResult *res, int row, int col, int len)
{
	const char *v = RemoteGetValue(res, row, col);
	uint32		u32;
	uint64		u64;

	if (RemoteGetIsNull(res, row, col) || RemoteGetLength(res, row, col) != len)
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("unexpected value in column %d of a remote read", col + 1)));
	if (len == 4)
	{
		memcpy(&u32, v, 4);
		return (int32) pg_ntoh32(u32);
	}
	memcpy(&u64, v, 8);
	return (int64) pg_ntoh64(u64);
}

/*
 * Check a read's result (six columns with the types of streamguard.event,
 * except the payload, which may also come as text or json: their binary
 * format is the text; only the worker's partitions) and take first/last
 * per partition, as the fetch returns them, from its partition and seq
 * columns alone: cheap, so that the next read can be sent ahead before the
 * rows are converted (sg_remote_store).  Returns how many rows.
 */
static int
sg_remote_scan(SgWorker *w, SgRemoteResult *res, int64 *first, int64 *last)
{
	static const Oid want[6] = {INT4OID, INT8OID, TEXTOID, JSONBOID, TEXTOID, TIMESTAMPTZOID};
	int			nparts = w->def.remote_nparts;
	int			row;
	int			c;

	if (RemoteNFields(res) != 6)
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("a remote read returned %d columns instead of 6", RemoteNFields(res))));
	for (c = 0; c < 6; c++)
		if (RemoteGetType(res, c) != want[c] &&
			!(c == 3 && (RemoteGetType(res, c) == TEXTOID || RemoteGetType(res, c) == JSONOID)))
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("column %d of a remote read has type %u, not %u", c + 1,
							RemoteGetType(res, c), want[c])));
	for (row = 0; row < RemoteNTuples(res); row++)
	{
		int			p = (int) sg_remote_int(res, row, 0, 4);
		int64		seq = sg_remote_int(res, row, 1, 8);

		CHECK_FOR_INTERRUPTS();

		if (p < 0 || p >= nparts || !sg_remote_owns(w, p))
			ereport(ERROR,
					(errcode(ERRCODE_PROTOCOL_VIOLATION),
					 errmsg("a remote read returned partition %d of %d, not one it was asked for", p, nparts)));
		if (first[p] == 0)
			first[p] = seq;
		last[p] = seq;
	}
	return RemoteNTuples(res);
}

/*
 * The rows of a read that sg_remote_scan checked (binary results: the
 * integers and the timestamp taken as they are, text as it is, jsonb from
 * its text after the format's version byte) into `store`.  Parsing the
 * payloads is most of a remote source's work.  Each row is converted in a
 * short-lived context, reset after the tuplestore copied the row: the
 * parser's scratch memory (lexer, parse states, numerics) would otherwise
 * pile up in the batch's context, a few kilobytes a row, until the batch
 * ends.
 */
static void
sg_remote_store(SgWorker *w, SgRemoteResult *res, Tuplestorestate *store)
{
	int			row;
	int			c;
	bool		payload_jsonb = RemoteGetType(res, 3) == JSONBOID;
	MemoryContext rowcxt = AllocSetContextCreate(CurrentMemoryContext, "remote source row",
												 ALLOCSET_DEFAULT_SIZES);
	MemoryContext oldcxt = CurrentMemoryContext;

	for (row = 0; row < RemoteNTuples(res); row++)
	{
		Datum		v[6];
		bool		n[6];
		const char *payload;

		CHECK_FOR_INTERRUPTS();

		MemoryContextReset(rowcxt);
		MemoryContextSwitchTo(rowcxt);

		for (c = 0; c < 6; c++)
			n[c] = RemoteGetIsNull(res, row, c);
		v[0] = Int32GetDatum((int32) sg_remote_int(res, row, 0, 4));
		v[1] = Int64GetDatum(sg_remote_int(res, row, 1, 8));
		v[2] = n[2] ? (Datum) 0 : PointerGetDatum(cstring_to_text_with_len(RemoteGetValue(res, row, 2),
																			RemoteGetLength(res, row, 2)));
		payload = RemoteGetValue(res, row, 3);
		if (payload_jsonb)
		{
			if (n[3] || RemoteGetLength(res, row, 3) < 1 || payload[0] != 1)
				ereport(ERROR,
						(errcode(ERRCODE_PROTOCOL_VIOLATION),
						 errmsg("unsupported jsonb format in a remote read")));
			payload++;
		}
		v[3] = DirectFunctionCall1(jsonb_in, CStringGetDatum(payload));
		v[4] = n[4] ? (Datum) 0 : PointerGetDatum(cstring_to_text_with_len(RemoteGetValue(res, row, 4),
																			RemoteGetLength(res, row, 4)));
		v[5] = TimestampTzGetDatum((TimestampTz) sg_remote_int(res, row, 5, 8));
		/* the tuplestore copies the row into its own context */
		MemoryContextSwitchTo(oldcxt);
		tuplestore_putvalues(store, w->event_desc, v, n);
	}
	MemoryContextSwitchTo(oldcxt);
	MemoryContextDelete(rowcxt);
}

/*
 * Read a batch from a stream on another streamguard server, after the
 * positions kept here (locked for this transaction).  s->lost gets what
 * retention removed ahead of each position (sg_remote_lost), added to
 * remote_position.lost when the positions move (sg_remote_source_advance).
 *
 * Read ahead: after a full batch, the read of the next one is sent at
 * once, from the positions this batch moves to, and runs on the remote
 * while this batch is processed and committed here.  The next batch takes
 * it only if the positions it locks are exactly those (whatever moved them
 * otherwise -- a failed batch, a control call -- the read is run again),
 * and only if it found events (an empty one may be stale).  The remote
 * read has no side effects, so a read ahead that is not taken is just
 * dropped.
 */
static int
sg_remote_fetch(SgWorker *w, SgRemoteSource *s, Tuplestorestate *store, int64 *first, int64 *last)
{
	SgRemote   *r;
	Oid			types[3] = {INT4OID, INT4OID, INT4OID};
	Datum		values[3] = {Int32GetDatum(w->def.id), Int32GetDatum(Max(w->def.nworkers, 1)),
	Int32GetDatum(w->def.worker)};
	int			nparts = w->def.remote_nparts;
	int64	   *pos = palloc0(sizeof(int64) * nparts);
	SgUserSave	save;
	uint64		i;
	int			fetched;
	int			k;
	SgRemoteResult *res = NULL;
	uint64		ticket = s->read_ahead;

	/* a worker beyond the partition count has nothing to read */
	if (sg_remote_nowned(w) == 0)
	{
		for (k = 0; k < nparts; k++)
			first[k] = last[k] = 0;
		return 0;
	}
	r = WorkerRemote(w, &s->remote, SG_SIDE_SOURCE);
	s->read_ahead = 0;
	SgBecomeDataOwner(&save, false);
	if (SPI_execute_plan(SgPlanCached(NULL,
									  "SELECT partition, position FROM streamguard.remote_position "
									  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1 "
									  "AND partition OPERATOR(pg_catalog.%) $2 OPERATOR(pg_catalog.=) $3 FOR UPDATE",
									  3, types),
						 values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "remote position lookup failed");
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		int			p = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));

		CHECK_FOR_INTERRUPTS();

		if (p >= 0 && p < nparts)
			pos[p] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
	}
	SgRestoreUser(&save);

	if (s->lost == NULL)
		s->lost = MemoryContextAllocZero(TopMemoryContext, sizeof(int64) * nparts);
	if (s->read_ahead_pos == NULL)
		s->read_ahead_pos = MemoryContextAllocZero(TopMemoryContext, sizeof(int64) * nparts);
	for (k = 0; k < nparts; k++)
	{
		first[k] = 0;
		last[k] = pos[k];
		s->lost[k] = 0;
	}
	for (k = 0; k < nparts; k++)
	{
		const char *params[2];
		int			p = k;

		if (pos[p] < 0 && sg_remote_owns(w, p))
		{
			/*
			 * start_from 'end', settled once: after every seq below the
			 * remote's readable horizon (a late commit below the last seq is
			 * still read), stored now, with or without events to read.
			 */
			params[0] = w->def.remote_stream;
			params[1] = psprintf("%d", p);
			res = RemoteExec(r, "SELECT readable_horizon OPERATOR(pg_catalog.-) 1 "
							 "FROM streamguard.stream_partitions WHERE stream OPERATOR(pg_catalog.=) $1 "
							 "AND partition OPERATOR(pg_catalog.=) $2::pg_catalog.int4", 2, params);
			if (RemoteNTuples(res) != 1 || RemoteGetIsNull(res, 0, 0))
			{
				RemoteClear(res);
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("could not find the end of partition %d of stream \"%s\" on server \"%s\"",
								p, w->def.remote_stream, w->def.source_server)));
			}
			pos[p] = Max(strtoll(RemoteGetValue(res, 0, 0), NULL, 10), 0);
			RemoteClear(res);
			res = NULL;
			last[p] = pos[p];
			sg_set_remote_position(w, p, pos[p]);
		}
	}

	/* the read ahead, if it read from exactly these positions */
	if (ticket != 0 && s->read_ahead_rotor == s->rotor &&
		memcmp(s->read_ahead_pos, pos, sizeof(int64) * nparts) == 0)
	{
		res = RemoteReceive(r, ticket);
		if (res != NULL && RemoteNTuples(res) == 0)
		{
			RemoteClear(res);
			res = NULL;
		}
	}
	if (res == NULL)
		res = RemoteExecParams(r, sg_remote_read_sql(w, s), sg_remote_read_nparams(w),
							   sg_remote_read_params(w, pos, s->rotor), true);
	fetched = sg_remote_scan(w, res, first, last);
	for (k = 0; k < nparts; k++)
		if (first[k] > pos[k] + 1)
			s->lost[k] = sg_remote_lost(w, r, k, pos[k], first[k]);
	s->rotor++;

	/*
	 * A full batch: the next one is likely waiting too, read it ahead --
	 * sent before this batch's rows are converted, so that the remote reads
	 * while we parse.
	 */
	if (fetched >= w->def.batch_size)
	{
		memcpy(s->read_ahead_pos, last, sizeof(int64) * nparts);
		s->read_ahead_rotor = s->rotor;
		s->read_ahead = RemoteSendQuery(r, sg_remote_read_sql(w, s), sg_remote_read_nparams(w),
										sg_remote_read_params(w, last, s->rotor), true);
	}
	sg_remote_store(w, res, store);
	RemoteClear(res);
	if (fetched >= w->def.batch_size)
		WorkerFault(w, SG_FAULT_READ_AHEAD);
	WorkerRemoteStatus(w, SG_SIDE_SOURCE, r);
	return fetched;
}

/* ------------------------------------------------------------ routine */

/* the state, and the columns of relation "batch": a stream's */
static void
sg_remote_source_open(SgWorker *w)
{
	MemoryContext old;

	w->source_state = MemoryContextAllocZero(TopMemoryContext, sizeof(SgRemoteSource));
	WorkerBegin("start");
	old = MemoryContextSwitchTo(TopMemoryContext);
	w->event_desc = SgEventTupleDesc();
	MemoryContextSwitchTo(old);
	WorkerCommit();
}

/* the remote stream's partitions, as create_pipeline found them */
static bool
sg_remote_source_begin(SgWorker *w, SgBatch *b)
{
	b->nparts = w->def.remote_nparts;
	return true;
}

/*
 * Read a batch (sg_remote_fetch); with b->advance the positions move past
 * it in the same transaction.
 */
static int
sg_remote_source_fetch(SgWorker *w, SgBatch *b)
{
	int			fetched = sg_remote_fetch(w, (SgRemoteSource *) w->source_state, b->store, b->first, b->last);

	if (fetched > 0 && b->advance)
		sg_remote_source_advance(w, b, b->last, w->def.remote_nparts);
	return fetched;
}

/*
 * Move the remote positions kept here forward (never back), with the loss
 * the last fetch found past the old ones.
 */
static void
sg_remote_source_advance(SgWorker *w, SgBatch *b, int64 *to, int nparts)
{
	SgRemoteSource *s = (SgRemoteSource *) w->source_state;
	Oid			types[3] = {INT4OID, INT8ARRAYOID, INT8ARRAYOID};
	Datum		values[3];
	Datum	   *elems = palloc(sizeof(Datum) * nparts);
	Datum	   *lost = palloc(sizeof(Datum) * nparts);
	SgUserSave	save;
	int			p;

	SgBecomeDataOwner(&save, false);
	for (p = 0; p < nparts; p++)
		elems[p] = Int64GetDatum(to[p]);
	values[0] = Int32GetDatum(w->def.id);
	values[1] = PointerGetDatum(construct_array(elems, nparts, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));

	/* the loss the last fetch found goes with the positions past it */
	for (p = 0; p < nparts; p++)
	{
		lost[p] = Int64GetDatum(s->lost ? s->lost[p] : 0);
		if (s->lost)
			s->lost[p] = 0;
	}
	values[2] = PointerGetDatum(construct_array(lost, nparts, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	if (SPI_execute_plan(SgPlanCached(NULL,
									  "UPDATE streamguard.remote_position "
									  "SET position = ($2)[partition OPERATOR(pg_catalog.+) 1], "
									  "lost = lost OPERATOR(pg_catalog.+) ($3)[partition OPERATOR(pg_catalog.+) 1], "
									  "updated_at = pg_catalog.now() "
									  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1 "
									  "AND ($2)[partition OPERATOR(pg_catalog.+) 1] OPERATOR(pg_catalog.>) position",
									  3, types),
						 values, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "remote position update failed");
	SgRestoreUser(&save);
}

/*
 * The remote positions kept here, as this transaction sees them.  -1: not
 * settled yet (start_from 'end'), or no position row.
 */
static void
sg_remote_source_positions(SgWorker *w, SgBatch *b, int64 *pos, int nparts)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(w->def.id)};

	SgLoadPositions("SELECT partition, position FROM streamguard.remote_position "
					"WHERE pipeline_id OPERATOR(pg_catalog.=) $1",
					1, types, values, pos, nparts);
}

/* after a failed batch: the connection goes, and the read ahead with it */
static void
sg_remote_source_close(SgWorker *w)
{
	SgRemoteSource *s = (SgRemoteSource *) w->source_state;

	RemoteDisconnect(&s->remote);
	WorkerRemoteStatus(w, SG_SIDE_SOURCE, &s->remote);
}

const SgSourceRoutine SgRemoteSourceRoutine = {
	.name = "remote stream",
	.idle_ms = 100,				/* a remote source cannot wake us: poll it */
	.local_events = false,
	.open = sg_remote_source_open,
	.begin = sg_remote_source_begin,
	.fetch = sg_remote_source_fetch,
	.positions = sg_remote_source_positions,
	.advance = sg_remote_source_advance,
	.close = sg_remote_source_close,
};
