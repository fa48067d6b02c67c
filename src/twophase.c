/*-------------------------------------------------------------------------
 *
 * twophase.c
 *		Names a pipeline leaves on its remote sink, and the resolution of its in-doubt two-phase transactions.
 *
 * A two_phase batch prepares its remote transaction under a gid derived
 * from this installation and the pipeline (PipelineGidPrefix), marks it in
 * the sink's streamguard_sink_marker table inside that transaction, and
 * records the gid locally in the batch's transaction.  After a crash,
 * PipelineResolveInDoubt commits what committed here and rolls back the
 * rest; a gid recorded here that the sink neither holds prepared nor
 * marked committed is a lost batch.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "pgstat.h"
#include "postmaster/bgworker.h"

#include "pipeline.h"
#include "remote.h"
#include "streamguard.h"

/*
 * This installation's identity: a random value drawn at CREATE EXTENSION.
 * A copy of the data directory taken before that (a clone, a restored base
 * backup) shares the system identifier and the database OIDs but not this,
 * so the names we leave on remote servers (transaction ids, offsets and
 * marker keys) stay apart.  SPI connected.
 */
static char *
sg_installation_id(void)
{
	SgUserSave	save;
	char	   *id = NULL;

	SgBecomeDataOwner(&save, false);
	if (SPI_execute("SELECT id::pg_catalog.text FROM streamguard.installation", true, 0) == SPI_OK_SELECT &&
		SPI_processed == 1)
		id = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	SgRestoreUser(&save);
	if (id == NULL)
		elog(ERROR, "streamguard.installation must hold exactly one row");
	return id;
}

/* prefix of a pipeline's global transaction ids on its sink */
char *
PipelineGidPrefix(int32 pipeline_id)
{
	return psprintf("sg:" UINT64_FORMAT ":%s:%u:%d:", GetSystemIdentifier(), sg_installation_id(),
					MyDatabaseId, pipeline_id);
}

/* a pipeline's key in the sink's offsets and marker tables */
char *
PipelineSinkKey(int32 pipeline_id)
{
	return psprintf(UINT64_FORMAT ":%s:%u:%d", GetSystemIdentifier(), sg_installation_id(),
					MyDatabaseId, pipeline_id);
}

/*
 * two_phase: inside the remote transaction about to be prepared as `gid`,
 * record gid as the pipeline's last batch on the sink.  After COMMIT
 * PREPARED the marker proves the batch committed there; a prepared
 * transaction that vanished without it was lost (PipelineResolveInDoubt).
 */
void
PipelineSinkMarker(SgRemote *r, int32 pipeline_id, const char *gid)
{
	const char *params[2];

	params[0] = PipelineSinkKey(pipeline_id);
	params[1] = gid;
	RemoteClear(RemoteExec(r, "INSERT INTO public.streamguard_sink_marker AS m (pipeline, gid) VALUES ($1, $2) "
					   "ON CONFLICT (pipeline) DO UPDATE SET gid = excluded.gid", 2, params));
}

/*
 * Settle a pipeline's prepared transactions on its sink: commit those whose
 * batch committed here (recorded in remote_prepared), roll back the others,
 * and forget the records.  A record whose transaction is no longer prepared
 * there committed if the sink's marker names it; if not, the sink lost a
 * batch that this database committed (restored from a backup, failed over
 * to a standby that had not received it): its id is returned, for the
 * caller to stop the pipeline.  In a transaction that holds the pipeline
 * row.
 */
char *
PipelineResolveInDoubt(SgRemote *r, int32 pipeline_id, const char *name)
{
	const char *params[1];
	SgRemoteResult *res;
	SgUserSave	save;
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(pipeline_id)};
	bool	   *known;
	char	   *key = PipelineSinkKey(pipeline_id);
	char	   *marker = NULL;
	char	   *lost = NULL;
	SPITupleTable *recs;
	uint64		nrecs,
				k;
	int			i;

	params[0] = psprintf("%s%%", PipelineGidPrefix(pipeline_id));
	res = RemoteExec(r, "SELECT gid FROM pg_catalog.pg_prepared_xacts "
					 "WHERE gid OPERATOR(pg_catalog.~~) $1 "
					 "AND database OPERATOR(pg_catalog.=) pg_catalog.current_database()", 1, params);
	SgBecomeDataOwner(&save, true);
	if (SPI_execute_with_args("SELECT gid FROM streamguard.remote_prepared WHERE pipeline_id = $1",
							  1, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "in-doubt lookup failed");
	recs = SPI_tuptable;
	nrecs = SPI_processed;
	known = palloc0(sizeof(bool) * Max(RemoteNTuples(res), 1));
	for (k = 0; k < nrecs; k++)
	{
		char	   *rec = SPI_getvalue(recs->vals[k], recs->tupdesc, 1);
		bool		prepared = false;

		for (i = 0; i < RemoteNTuples(res); i++)
			if (strcmp(RemoteGetValue(res, i, 0), rec) == 0)
				known[i] = prepared = true;
		if (prepared)
			continue;
		/* committed there already, or lost: the marker tells */
		if (marker == NULL)
		{
			SgRemoteResult *mres;

			params[0] = key;
			mres = RemoteExec(r, "SELECT gid FROM public.streamguard_sink_marker "
							  "WHERE pipeline OPERATOR(pg_catalog.=) $1", 1, params);
			marker = pstrdup(RemoteNTuples(mres) == 1 ? RemoteGetValue(mres, 0, 0) : "");
			RemoteClear(mres);
		}
		if (strcmp(marker, rec) != 0)
			lost = pstrdup(rec);
	}
	/* the decisions recorded here must be durable before they act there */
	HorizonMakeDurable();
	for (i = 0; i < RemoteNTuples(res); i++)
	{
		char	   *gid = RemoteLiteral(r, RemoteGetValue(res, i, 0));

		ereport(LOG,
				(errmsg("streamguard pipeline \"%s\": %s in-doubt remote transaction %s",
						name, known[i] ? "committing" : "rolling back", gid)));
		RemoteExecOk(r, psprintf("%s PREPARED %s", known[i] ? "COMMIT" : "ROLLBACK", gid));
	}
	RemoteClear(res);
	if (SPI_execute_with_args("DELETE FROM streamguard.remote_prepared WHERE pipeline_id = $1",
							  1, types, values, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "in-doubt cleanup failed");
	SgRestoreUser(&save);
	return lost;
}
