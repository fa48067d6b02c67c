/*-------------------------------------------------------------------------
 *
 * source.c
 *		Reading a pipeline's batch and advancing its positions.
 *
 * A local source is read through the pipeline's consumer (ConsumerFetch,
 * consumer.c, which advances the positions in the same call when asked);
 * a remote source (a stream on another streamguard server) is read with
 * streamguard.read() over libpq after the positions kept here in
 * streamguard.remote_position, locked for the batch's transaction.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "pgstat.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "worker.h"

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

/*
 * Read a batch from a stream on another streamguard server, after the
 * positions kept here (locked for this transaction).  w->remote_lost gets
 * what retention removed ahead of each position (sg_remote_lost), added
 * to remote_position.lost when the positions move (SourceAdvance).
 */
static int
sg_remote_fetch(SgWorker *w, Tuplestorestate *store, int64 *first, int64 *last)
{
	SgRemote   *r = WorkerRemote(w, SG_SIDE_SOURCE);
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(w->def.id)};
	int			nparts = w->def.remote_nparts;
	int64	   *pos = palloc0(sizeof(int64) * nparts);
	SgUserSave	save;
	uint64		i;
	int			remaining = w->def.batch_size;
	int			k;

	SgBecomeDataOwner(&save, false);
	if (SPI_execute_with_args("SELECT partition, position FROM streamguard.remote_position "
							  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1 FOR UPDATE",
							  1, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "remote position lookup failed");
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		int			p = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));

		if (p >= 0 && p < nparts)
			pos[p] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
	}
	SgRestoreUser(&save);

	if (w->remote_lost == NULL)
		w->remote_lost = MemoryContextAllocZero(TopMemoryContext, sizeof(int64) * nparts);
	for (k = 0; k < nparts; k++)
	{
		first[k] = 0;
		last[k] = pos[k];
		w->remote_lost[k] = 0;
	}
	for (k = 0; k < nparts; k++)
	{
		const char *params[2];
		SgRemoteResult *res;
		int			p = k;

		if (pos[p] < 0)
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
			last[p] = pos[p];
			sg_set_remote_position(w, p, pos[p]);
		}
	}
	for (k = 0; k < nparts && remaining > 0; k++)
	{
		int			p = (int) ((w->remote_rotor + k) % (uint32) nparts);
		const char *params[4];
		SgRemoteResult *res;
		int			row;

		params[0] = w->def.remote_stream;
		params[1] = psprintf("%d", p);
		params[2] = psprintf("%lld", (long long) pos[p]);
		params[3] = psprintf("%d", remaining);
		res = RemoteExec(r, "SELECT partition, seq, key, payload, dedup_key, appended_at "
						 "FROM streamguard.read($1, $2::int, $3::bigint, $4::int)", 4, params);
		for (row = 0; row < RemoteNTuples(res); row++)
		{
			Datum		v[6];
			bool		n[6];
			int			c;

			for (c = 0; c < 6; c++)
				n[c] = RemoteGetIsNull(res, row, c);
			v[0] = Int32GetDatum(atoi(RemoteGetValue(res, row, 0)));
			v[1] = Int64GetDatum(strtoll(RemoteGetValue(res, row, 1), NULL, 10));
			v[2] = n[2] ? (Datum) 0 : CStringGetTextDatum(RemoteGetValue(res, row, 2));
			v[3] = DirectFunctionCall1(jsonb_in, CStringGetDatum(RemoteGetValue(res, row, 3)));
			v[4] = n[4] ? (Datum) 0 : CStringGetTextDatum(RemoteGetValue(res, row, 4));
			v[5] = DirectFunctionCall3(timestamptz_in, CStringGetDatum(RemoteGetValue(res, row, 5)),
									   ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));
			tuplestore_putvalues(store, w->event_desc, v, n);
			if (first[p] == 0)
				first[p] = DatumGetInt64(v[1]);
			last[p] = DatumGetInt64(v[1]);
			remaining--;
		}
		RemoteClear(res);
		if (first[p] > pos[p] + 1)
			w->remote_lost[p] = sg_remote_lost(w, r, p, pos[p], first[p]);
	}
	w->remote_rotor++;
	WorkerRemoteStatus(w, SG_SIDE_SOURCE, r);
	return w->def.batch_size - remaining;
}

/* move the positions forward: the local consumer, or the remote positions */
void
SourceAdvance(SgWorker *w, SgStreamMeta *meta, int64 *last, int nparts)
{
	SgUserSave	save;

	if (w->def.source_kafka)
	{
		KafkaSourceAdvance(w, last, nparts);
		return;
	}
	SgBecomeDataOwner(&save, false);
	if (w->def.source_server)
	{
		Oid			types[3] = {INT4OID, INT8ARRAYOID, INT8ARRAYOID};
		Datum		values[3];
		Datum	   *elems = palloc(sizeof(Datum) * nparts);
		Datum	   *lost = palloc(sizeof(Datum) * nparts);
		int			p;

		for (p = 0; p < nparts; p++)
			elems[p] = Int64GetDatum(last[p]);
		values[0] = Int32GetDatum(w->def.id);
		values[1] = PointerGetDatum(construct_array(elems, nparts, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));

		/* the loss the last fetch found goes with the positions past it */
		for (p = 0; p < nparts; p++)
		{
			lost[p] = Int64GetDatum(w->remote_lost ? w->remote_lost[p] : 0);
			if (w->remote_lost)
				w->remote_lost[p] = 0;
		}
		values[2] = PointerGetDatum(construct_array(lost, nparts, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		if (SPI_execute_with_args("UPDATE streamguard.remote_position "
								  "SET position = ($2)[partition OPERATOR(pg_catalog.+) 1], "
								  "lost = lost OPERATOR(pg_catalog.+) ($3)[partition OPERATOR(pg_catalog.+) 1], "
								  "updated_at = pg_catalog.now() "
								  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1 "
								  "AND ($2)[partition OPERATOR(pg_catalog.+) 1] OPERATOR(pg_catalog.>) position",
								  3, types, values, NULL, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "remote position update failed");
	}
	else
		ConsumerAdvance(meta, w->consumer_name, last);
	SgRestoreUser(&save);
}

/*
 * The committed positions (as this transaction sees them): the local
 * consumer's, or the remote positions kept here.  -1: not settled yet
 * (start_from 'end' of a remote source), or no position row.
 */
void
SourcePositions(SgWorker *w, SgStreamMeta *meta, int64 *pos, int nparts)
{
	Oid			types[2] = {INT4OID, TEXTOID};
	Datum		values[2];
	SgUserSave	save;
	uint64		i;
	int			ret;

	for (i = 0; i < (uint64) nparts; i++)
		pos[i] = -1;
	SgBecomeDataOwner(&save, false);
	if (w->def.source_server)
	{
		values[0] = Int32GetDatum(w->def.id);
		ret = SPI_execute_with_args("SELECT partition, position FROM streamguard.remote_position "
									"WHERE pipeline_id OPERATOR(pg_catalog.=) $1",
									1, types, values, NULL, false, 0);
	}
	else
	{
		values[0] = Int32GetDatum(meta->stream_id);
		values[1] = CStringGetTextDatum(w->consumer_name);
		ret = SPI_execute_with_args("SELECT partition, position FROM streamguard.consumer "
									"WHERE stream_id OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2",
									2, types, values, NULL, false, 0);
	}
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "position lookup failed");
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		int			p = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));

		if (p >= 0 && p < nparts)
			pos[p] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
	}
	SgRestoreUser(&save);
}

SgStreamMeta *
SourceOpen(SgWorker *w)
{
	Oid			save_user;
	int			save_sec;
	SgStreamMeta *meta;

	/* the owner's privilege on the source is checked every batch */
	GetUserIdAndSecContext(&save_user, &save_sec);
	SetUserIdAndSecContext(w->def.owner, save_sec | SECURITY_LOCAL_USERID_CHANGE);
	meta = StreamLookup(w->def.stream, SG_PRIV_READ);
	SetUserIdAndSecContext(save_user, save_sec);
	HorizonEnsureSeqReady(meta->ref, meta->stream_id);
	return meta;
}


/*
 * Read up to batch_size events into `store`; first/last get each
 * partition's first and last seq read (first 0: none).  With `advance`
 * the positions move past them in the same transaction -- this is where a
 * pipeline's offsets advance for exactly_once and at_most_once (for
 * at_least_once, SourceAdvance after the sink committed).
 */
int
SourceFetch(SgWorker *w, SgStreamMeta *meta, Tuplestorestate *store,
			int64 *first, int64 *last, bool advance)
{
	SgUserSave	save;
	int			fetched;

	if (w->def.source_kafka)
		return KafkaSourceFetch(w, store, first, last, advance);
	if (w->def.source_server)
	{
		fetched = sg_remote_fetch(w, store, first, last);
		if (fetched > 0 && advance)
			SourceAdvance(w, NULL, last, w->def.remote_nparts);
		return fetched;
	}
	SgBecomeDataOwner(&save, false);
	fetched = ConsumerFetch(meta, w->consumer_name, w->def.batch_size, store, w->event_desc,
							false, advance, w->def.nworkers, w->def.worker, first, last);
	SgRestoreUser(&save);
	return fetched;
}

/* the partitions of a remote or Kafka source (a local one: its meta) */
int
SourcePartitions(SgWorker *w)
{
	if (w->def.source_kafka)
		return KafkaSourcePartitions(w);
	return w->def.remote_nparts;
}
