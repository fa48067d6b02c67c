/*-------------------------------------------------------------------------
 *
 * twophase.c
 *		Names a pipeline leaves on its remote sink, and the resolution of its in-doubt two-phase transactions.
 *
 * A two_phase batch prepares its remote transaction under a gid derived
 * from this installation, the pipeline and the worker (PipelineGid), marks
 * it in the sink's streamguard_sink_marker table inside that transaction
 * (one marker row per worker), and records the gid locally in the batch's
 * transaction.  After a crash, PipelineResolveInDoubt commits what
 * committed here and rolls back the rest; a gid recorded here that the
 * sink neither holds prepared nor marked committed is a lost batch.
 *
 * Several workers (workers => N): each settles only its own gids, those
 * that carry its worker number -- any of them was prepared by an earlier
 * incarnation of the same worker, which the current one fenced when it
 * registered its epoch (the registration waits for that incarnation's
 * batch to end, and its next fence fails), so none of them can still
 * commit its local record.  A batch of another live worker, prepared and
 * about to commit here, is never touched.  The gids of workers the
 * pipeline no longer has (alter_pipeline to fewer workers) are settled by
 * worker 0: the alter bumped the generation, which fenced them all.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "catalog/sg_catalog.h"
#include "io/remote.h"
#include "pipeline/twophase.h"
#include "shmem/horizon.h"

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
	/* a cached plan: a two_phase sink builds a gid every batch */
	if (SPI_execute_plan(SgPlanCached(NULL, "SELECT id::pg_catalog.text FROM streamguard.installation", 0, NULL),
						 NULL, NULL, true, 0) == SPI_OK_SELECT &&
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

/*
 * The gid of a two_phase attempt: "<prefix><epoch>:<attempt>" for worker 0
 * (the form of 0.1, when a pipeline had one worker), and
 * "<prefix>w<worker>:<epoch>:<attempt>" for the others.  The epoch is the
 * incarnation's and the attempt counts the incarnation's remote
 * transactions, so a retry never collides with a delayed PREPARE.
 */
char *
PipelineGid(int32 pipeline_id, int32 worker, int64 epoch, int64 attempt)
{
	char	   *prefix = PipelineGidPrefix(pipeline_id);

	if (worker == 0)
		return psprintf("%s%lld:%lld", prefix, (long long) epoch, (long long) attempt);
	return psprintf("%sw%d:%lld:%lld", prefix, worker, (long long) epoch, (long long) attempt);
}

/*
 * What a pipeline's gid prefix keeps across a new system identifier:
 * ":<installation>:<database>:<pipeline>:".  pg_upgrade fills a new
 * cluster, made by initdb, that has an identifier of its own, but it
 * carries the installation id, the database's OID and the pipeline's id;
 * the batches prepared before the upgrade still have to be settled.  SPI
 * connected.
 */
static char *
sg_gid_tail(int32 pipeline_id)
{
	return psprintf(":%s:%u:%d:", sg_installation_id(), MyDatabaseId, pipeline_id);
}

/*
 * Where `gid` goes on after its prefix if it is a gid of this pipeline
 * under any system identifier ("sg:<digits><tail>"), else NULL.
 */
static const char *
sg_gid_rest(const char *gid, const char *tail)
{
	const char *s = gid + 3;

	if (strncmp(gid, "sg:", 3) != 0)
		return NULL;
	while (*s >= '0' && *s <= '9')
		s++;
	if (s == gid + 3 || strncmp(s, tail, strlen(tail)) != 0)
		return NULL;
	return s + strlen(tail);
}

/* the worker whose gid this is (PipelineGid), from sg_gid_rest */
static int32
sg_gid_worker(const char *rest)
{
	if (rest != NULL && *rest == 'w')
		return (int32) strtol(rest + 1, NULL, 10);
	return 0;
}

/*
 * The marker key of the worker that prepared `gid` (PipelineWorkerKey
 * under the system identifier the gid carries): the gid's prefix without
 * "sg:" and its last ':', and ":w<worker>" for workers other than 0.
 */
static char *
sg_gid_marker_key(const char *gid, const char *rest, int32 worker)
{
	char	   *key = pnstrdup(gid + 3, rest - gid - 4);

	if (worker == 0)
		return key;
	return psprintf("%s:w%d", key, worker);
}

/*
 * Whether `resolver` settles the gids of worker `owner`: its own, and
 * worker 0 also those of workers the pipeline no longer has.  A negative
 * resolver (drop_pipeline, every worker fenced) settles all.
 */
static bool
sg_settles(int32 resolver, int32 nworkers, int32 owner)
{
	if (resolver < 0)
		return true;
	return owner == resolver || (resolver == 0 && owner >= nworkers);
}

/* a pipeline's key in the sink's offsets table */
char *
PipelineSinkKey(int32 pipeline_id)
{
	return psprintf(UINT64_FORMAT ":%s:%u:%d", GetSystemIdentifier(), sg_installation_id(),
					MyDatabaseId, pipeline_id);
}

/*
 * A worker's key in the sink's marker table and the name of its staging
 * table: the pipeline's key for worker 0 (as in 0.1), with ":w<worker>"
 * for the others, so that workers never overwrite each other's marker.
 */
char *
PipelineWorkerKey(int32 pipeline_id, int32 worker)
{
	if (worker == 0)
		return PipelineSinkKey(pipeline_id);
	return psprintf("%s:w%d", PipelineSinkKey(pipeline_id), worker);
}

/*
 * two_phase: inside the remote transaction about to be prepared as `gid`,
 * record gid as the worker's last batch on the sink.  After COMMIT
 * PREPARED the marker proves the batch committed there; a prepared
 * transaction that vanished without it was lost (PipelineResolveInDoubt).
 */
void
PipelineSinkMarker(SgRemote *r, int32 pipeline_id, int32 worker, const char *gid)
{
	const char *params[2];

	params[0] = PipelineWorkerKey(pipeline_id, worker);
	params[1] = gid;
	RemoteClear(RemoteExec(r, "INSERT INTO public.streamguard_sink_marker AS m (pipeline, gid) VALUES ($1, $2) "
					   "ON CONFLICT (pipeline) DO UPDATE SET gid = excluded.gid", 2, params));
}

/* the gid the marker row `key` names on the sink ("" if none) */
static char *
sg_marker(SgRemote *r, const char *key)
{
	const char *params[1] = {key};
	SgRemoteResult *res;
	char	   *gid;

	res = RemoteExec(r, "SELECT gid FROM public.streamguard_sink_marker "
					 "WHERE pipeline OPERATOR(pg_catalog.=) $1", 1, params);
	gid = pstrdup(RemoteNTuples(res) == 1 ? RemoteGetValue(res, 0, 0) : "");
	RemoteClear(res);
	return gid;
}

/*
 * Settle prepared transactions of a pipeline on its sink: commit those
 * whose batch committed here (recorded in remote_prepared), roll back the
 * others, and forget the records.  Only those `resolver` settles
 * (sg_settles: a worker's own, and worker 0's share of the workers the
 * pipeline no longer has; -1: all, for drop_pipeline) among `nworkers`.
 * A record whose transaction is no longer prepared there committed if the
 * sink's marker of its worker names it; if not, the sink lost a batch
 * that this database committed (restored from a backup, failed over to a
 * standby that had not received it): its id is returned, for the caller
 * to stop the pipeline.  In a transaction that holds the pipeline row (a
 * worker: its fence, which also holds its worker row).
 */
char *
PipelineResolveInDoubt(SgRemote *r, int32 pipeline_id, const char *name, int32 resolver, int32 nworkers)
{
	const char *params[1];
	SgRemoteResult *res;
	SgUserSave	save;
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(pipeline_id)};
	bool	   *known;
	bool	   *mine;
	char	   *tail = sg_gid_tail(pipeline_id);
	char	   *lost = NULL;
	SPITupleTable *recs;
	uint64		nrecs,
				k;
	int			i;
	List	   *settled = NIL;
	ListCell   *lc;

	/* this pipeline's, under this or an earlier system identifier */
	params[0] = psprintf("sg:%%%s%%", tail);
	res = RemoteExec(r, "SELECT gid FROM pg_catalog.pg_prepared_xacts "
					 "WHERE gid OPERATOR(pg_catalog.~~) $1 "
					 "AND database OPERATOR(pg_catalog.=) pg_catalog.current_database()", 1, params);
	SgBecomeDataOwner(&save, true);
	if (SPI_execute_with_args("SELECT gid FROM streamguard.remote_prepared WHERE pipeline_id OPERATOR(pg_catalog.=) $1",
							  1, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "in-doubt lookup failed");
	recs = SPI_tuptable;
	nrecs = SPI_processed;
	known = palloc0(sizeof(bool) * Max(RemoteNTuples(res), 1));
	mine = palloc0(sizeof(bool) * Max(RemoteNTuples(res), 1));
	for (i = 0; i < RemoteNTuples(res); i++)
	{
		const char *rest = sg_gid_rest(RemoteGetValue(res, i, 0), tail);

		mine[i] = rest != NULL && sg_settles(resolver, nworkers, sg_gid_worker(rest));
	}
	for (k = 0; k < nrecs; k++)
	{
		char	   *rec = SPI_getvalue(recs->vals[k], recs->tupdesc, 1);
		const char *rest = sg_gid_rest(rec, tail);
		int32		owner = sg_gid_worker(rest);
		bool		prepared = false;

		/* another live worker's: it forgets its own records */
		if (!sg_settles(resolver, nworkers, owner))
			continue;
		settled = lappend(settled, rec);
		for (i = 0; i < RemoteNTuples(res); i++)
			if (strcmp(RemoteGetValue(res, i, 0), rec) == 0)
				known[i] = prepared = true;
		if (prepared)
			continue;
		/* committed there already, or lost: the worker's marker tells */
		if (strcmp(sg_marker(r, rest ? sg_gid_marker_key(rec, rest, owner) :
							 PipelineWorkerKey(pipeline_id, owner)), rec) != 0)
			lost = pstrdup(rec);
	}
	/* the decisions recorded here must be durable before they act there */
	HorizonMakeDurable();
	for (i = 0; i < RemoteNTuples(res); i++)
	{
		char	   *gid;

		if (!mine[i])
			continue;
		gid = RemoteLiteral(r, RemoteGetValue(res, i, 0));
		ereport(LOG,
				(errmsg("streamguard pipeline \"%s\": %s in-doubt remote transaction %s",
						name, known[i] ? "committing" : "rolling back", gid)));
		RemoteExecOk(r, psprintf("%s PREPARED %s", known[i] ? "COMMIT" : "ROLLBACK", gid));
	}
	RemoteClear(res);
	if (settled != NIL)
	{
		Oid			dtypes[2] = {INT4OID, TEXTARRAYOID};
		Datum		dvalues[2];
		Datum	   *gids = palloc(sizeof(Datum) * list_length(settled));
		int			ngids = 0;

		foreach(lc, settled)
			gids[ngids++] = CStringGetTextDatum(lfirst(lc));
		dvalues[0] = Int32GetDatum(pipeline_id);
		dvalues[1] = PointerGetDatum(construct_array(gids, ngids, TEXTOID, -1, false, TYPALIGN_INT));
		if (SPI_execute_with_args("DELETE FROM streamguard.remote_prepared WHERE pipeline_id OPERATOR(pg_catalog.=) $1 "
								  "AND gid OPERATOR(pg_catalog.=) ANY ($2)",
								  2, dtypes, dvalues, NULL, false, 0) != SPI_OK_DELETE)
			elog(ERROR, "in-doubt cleanup failed");
	}
	SgRestoreUser(&save);
	return lost;
}
