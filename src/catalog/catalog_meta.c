/*-------------------------------------------------------------------------
 *
 * catalog_meta.c
 *		A stream's metadata as a backend sees it: the per-backend metadata
 *		cache (StreamLookup, StreamLookupReady), the caller's privileges on
 *		a stream, the stream's share lock against a drop (StreamLockShare)
 *		and its append lock (StreamLockAppend and the rest).  The helpers
 *		these go through (the data-owner switch, the plan cache, segment
 *		tables, SgExec) are in catalog.c; both are declared in
 *		catalog/sg_catalog.h.
 *
 * The metadata cache: a backend keeps each stream's row, grants, changes
 * of its partition count and its shared-memory handle in a hash keyed by
 * name, in CacheMemoryContext.  It is valid while the shared slot's
 * incarnation and generation are unchanged; changes bump the generation
 * when they commit (HorizonBumpGenerationAtCommit).  Metadata is read
 * with a fresh snapshot, as the data owner, so a REPEATABLE READ caller
 * still sees the current definition.
 *
 * Locks: StreamLockShare takes FOR KEY SHARE on the stream's catalog row
 * (drop_stream locks it FOR UPDATE); the append lock is an advisory lock
 * tag of ours, taken in RowExclusiveLock by appends and in ExclusiveLock
 * by a change of the partition count.  Both last until the transaction
 * ends.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "catalog/sg_catalog.h"
#include "core/compat.h"
#include "core/util.h"
#include "shmem/horizon.h"

static HTAB *sg_meta_cache = NULL;

/* ------------------------------------------------------- metadata cache */

static void
sg_load_meta(SgStreamMeta *meta, const char *name)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	SPIPlanPtr	plan;
	Snapshot	snap;
	int			ret;
	bool		isnull;
	int32		cur_seg,
				min_seg;
	uint32		gen_before = 0;
	int			i;
	SgUserSave	save;

	SgBecomeDataOwner(&save, true);
	/* a 0.2 catalog (served until ALTER EXTENSION UPDATE) has no payload_check */
	plan = SgPlanCached(NULL,
						get_attnum(get_relname_relid("stream", get_namespace_oid("streamguard", false)),
								   "payload_check") != InvalidAttrNumber ?
						"SELECT id, partitions, owner, current_seg, min_seg, dedup_window, "
						"payload_check OPERATOR(pg_catalog.=) 'object' "
						"FROM streamguard.stream WHERE name OPERATOR(pg_catalog.=) $1" :
						"SELECT id, partitions, owner, current_seg, min_seg, dedup_window, false "
						"FROM streamguard.stream WHERE name OPERATOR(pg_catalog.=) $1",
						1, types);
	values[0] = CStringGetTextDatum(name);
	snap = SgFreshSnapshot();
	ret = SPI_execute_snapshot(plan, values, NULL, snap, InvalidSnapshot,
							   true, false, 1);
	UnregisterSnapshot(snap);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "stream lookup failed: %s", SPI_result_code_string(ret));
	if (SPI_processed == 0)
	{
		SgRestoreUser(&save);
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("stream \"%s\" does not exist", name)));
	}
	meta->stream_id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	meta->nparts = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	meta->owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull));
	cur_seg = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull));
	min_seg = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 5, &isnull));
	meta->dedup_window_us = SgIntervalUsecs(DatumGetIntervalP(SPI_getbinval(SPI_tuptable->vals[0],
																				SPI_tuptable->tupdesc, 6, &isnull)));
	meta->payload_object = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 7, &isnull));
	strlcpy(meta->name, name, NAMEDATALEN);
	meta->write_seg = -1;
	meta->write_relid = InvalidOid;

	meta->ref = HorizonAttachStream(meta->stream_id, meta->nparts, cur_seg, min_seg,
									StreamCatalogOid());
	gen_before = HorizonGeneration(meta->ref.slot);

	/* changes of the partition count (repartition.c) */
	for (i = 0; i < meta->nchanges; i++)
		pfree(meta->changes[i].switch_seqs);
	if (meta->changes)
		pfree(meta->changes);
	meta->changes = NULL;
	meta->nchanges = 0;
	if (StreamRepartitionCatalog())
	{
		Oid			rtypes[1] = {INT4OID};
		Datum		rvalues[1];

		plan = SgPlanCached(NULL,
							"SELECT epoch, old_partitions, switch_seqs FROM streamguard.stream_repartition "
							"WHERE stream_id OPERATOR(pg_catalog.=) $1 ORDER BY epoch",
							1, rtypes);
		rvalues[0] = Int32GetDatum(meta->stream_id);
		snap = SgFreshSnapshot();
		ret = SPI_execute_snapshot(plan, rvalues, NULL, snap, InvalidSnapshot,
								   true, false, 0);
		UnregisterSnapshot(snap);
		if (ret != SPI_OK_SELECT)
			elog(ERROR, "partition change lookup failed: %s", SPI_result_code_string(ret));
		if (SPI_processed > 0)
			meta->changes = MemoryContextAllocZero(CacheMemoryContext,
												   sizeof(SgRepartition) * SPI_processed);
		for (i = 0; i < (int) SPI_processed; i++)
		{
			HeapTuple	t = SPI_tuptable->vals[i];
			SgRepartition *ch = &meta->changes[i];
			Datum	   *elems;
			bool	   *enulls;
			int			n,
						j;

			ch->epoch = DatumGetInt32(SPI_getbinval(t, SPI_tuptable->tupdesc, 1, &isnull));
			ch->old_nparts = DatumGetInt32(SPI_getbinval(t, SPI_tuptable->tupdesc, 2, &isnull));
			deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(t, SPI_tuptable->tupdesc, 3, &isnull)),
							  INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &elems, &enulls, &n);
			if (n != ch->old_nparts)
				elog(ERROR, "change %d of stream \"%s\" has %d switch points for %d partitions",
					 ch->epoch, name, n, ch->old_nparts);
			ch->switch_seqs = MemoryContextAlloc(CacheMemoryContext, sizeof(int64) * Max(n, 1));
			for (j = 0; j < n; j++)
				ch->switch_seqs[j] = enulls[j] ? 0 : DatumGetInt64(elems[j]);
			meta->nchanges++;
		}
	}

	/* grants */
	{
		Oid			gtypes[1] = {INT4OID};
		Datum		gvalues[1];

		plan = SgPlanCached(NULL,
							"SELECT grantee, can_append, can_read FROM streamguard.stream_grant "
							"WHERE stream_id OPERATOR(pg_catalog.=) $1",
							1, gtypes);
		gvalues[0] = Int32GetDatum(meta->stream_id);
		snap = SgFreshSnapshot();
		ret = SPI_execute_snapshot(plan, gvalues, NULL, snap, InvalidSnapshot,
								   true, false, 0);
		UnregisterSnapshot(snap);
		if (ret != SPI_OK_SELECT)
			elog(ERROR, "grant lookup failed: %s", SPI_result_code_string(ret));
		if (meta->grant_roles)
		{
			pfree(meta->grant_roles);
			pfree(meta->grant_append);
			pfree(meta->grant_read);
		}
		meta->ngrants = (int) SPI_processed;
		meta->grant_roles = MemoryContextAlloc(CacheMemoryContext, sizeof(Oid) * (meta->ngrants + 1));
		meta->grant_append = MemoryContextAlloc(CacheMemoryContext, sizeof(bool) * (meta->ngrants + 1));
		meta->grant_read = MemoryContextAlloc(CacheMemoryContext, sizeof(bool) * (meta->ngrants + 1));
		for (i = 0; i < meta->ngrants; i++)
		{
			HeapTuple	t = SPI_tuptable->vals[i];

			meta->grant_roles[i] = DatumGetObjectId(SPI_getbinval(t, SPI_tuptable->tupdesc, 1, &isnull));
			meta->grant_append[i] = DatumGetBool(SPI_getbinval(t, SPI_tuptable->tupdesc, 2, &isnull));
			meta->grant_read[i] = DatumGetBool(SPI_getbinval(t, SPI_tuptable->tupdesc, 3, &isnull));
		}
	}
	SgRestoreUser(&save);
	meta->generation = gen_before;
}

static bool
sg_role_has_privilege(SgStreamMeta *meta, Oid user, SgPrivilege priv)
{
	int			i;

	if (superuser_arg(user) || has_privs_of_role(user, meta->owner))
		return true;
	for (i = 0; i < meta->ngrants; i++)
	{
		bool		granted = (priv == SG_PRIV_APPEND) ? meta->grant_append[i] : meta->grant_read[i];

		if (granted && has_privs_of_role(user, meta->grant_roles[i]))
			return true;
	}
	return false;
}

static bool
sg_has_privilege(SgStreamMeta *meta, SgPrivilege priv)
{
	return sg_role_has_privilege(meta, GetUserId(), priv);
}

/*
 * Whether `role`, which need not be the current user, may append to the
 * stream: for code that appends on behalf of the role that set it up
 * (change capture).  False for a role that no longer exists.
 */
bool
StreamRoleMayAppend(SgStreamMeta *meta, Oid role)
{
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(role)))
		return false;
	return sg_role_has_privilege(meta, role, SG_PRIV_APPEND);
}

/* a pipeline feeding its own source would grow it without bound */
void
StreamCheckNotOwnSource(SgStreamMeta *meta)
{
	if (SgRunningForbidsAppendTo(meta->stream_id))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("a pipeline cannot append to its own source stream \"%s\"", meta->name),
				 errdetail("Each batch would feed the next one without end."),
				 errhint("Create the pipeline with allow_source_append => true if this is intended.")));
}

/*
 * Find a stream of the current database by name and check the caller's
 * privilege on it.  The caller must be connected to SPI.  The result is
 * valid until the next call.
 */
SgStreamMeta *
StreamLookup(const char *name, SgPrivilege priv)
{
	SgStreamMeta *meta;
	bool		found;
	char		key[NAMEDATALEN];

	SgCheckName("stream", name);
	if (sg_meta_cache == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = NAMEDATALEN;
		ctl.entrysize = sizeof(SgStreamMeta);
		ctl.hcxt = CacheMemoryContext;
		sg_meta_cache = hash_create("streamguard streams", 32, &ctl,
									HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	}
	memset(key, 0, sizeof(key));
	strlcpy(key, name, NAMEDATALEN);
	meta = hash_search(sg_meta_cache, key, HASH_ENTER, &found);
	if (!found)
	{
		memset(((char *) meta) + NAMEDATALEN, 0, sizeof(SgStreamMeta) - NAMEDATALEN);
		meta->ref.slot = -1;
	}
	if (!found ||
		!HorizonRefValid(meta->ref, MyDatabaseId, meta->stream_id) ||
		HorizonGeneration(meta->ref.slot) != meta->generation)
	{
		PG_TRY();
		{
			sg_load_meta(meta, name);
		}
		PG_CATCH();
		{
			meta->ref.slot = -1;
			PG_RE_THROW();
		}
		PG_END_TRY();
	}

	if (priv == SG_PRIV_APPEND)
		StreamCheckNotOwnSource(meta);
	if (priv == SG_PRIV_OWNER)
	{
		if (!superuser() && !has_privs_of_role(GetUserId(), meta->owner))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("must be owner of stream \"%s\"", meta->name)));
	}
	else if (priv != SG_PRIV_NONE && !sg_has_privilege(meta, priv))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to %s stream \"%s\"",
						priv == SG_PRIV_APPEND ? "append to" : "read", name),
				 errhint("The stream's owner can run streamguard.grant_stream('%s', '%s', '%s').",
						 name, GetUserNameFromId(GetUserId(), false),
						 priv == SG_PRIV_APPEND ? "append" : "read")));
	return meta;
}

/*
 * The stream's metadata when the backend's copy is current and the
 * stream's counters are loaded, else NULL; no privilege check.  For a hot
 * path that connects to SPI only when it must: on NULL, connect and call
 * StreamLookup (and the append loads the counters).
 */
SgStreamMeta *
StreamLookupReady(const char *name)
{
	SgStreamMeta *meta;
	char		key[NAMEDATALEN];

	if (sg_meta_cache == NULL)
		return NULL;
	memset(key, 0, sizeof(key));
	strlcpy(key, name, NAMEDATALEN);
	meta = hash_search(sg_meta_cache, key, HASH_FIND, NULL);
	if (meta == NULL || !HorizonRefValid(meta->ref, MyDatabaseId, meta->stream_id) ||
		HorizonGeneration(meta->ref.slot) != meta->generation ||
		!HorizonSeqReady(meta->ref.slot))
		return NULL;
	return meta;
}

/*
 * Keep the stream from being dropped until this transaction ends (a share
 * lock on its catalog row, which drop_stream locks FOR UPDATE): taken by
 * whatever creates something that depends on the stream.
 */
void
StreamLockShare(SgStreamMeta *meta)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(meta->stream_id)};
	SgUserSave	save;
	bool		gone;

	SgBecomeDataOwner(&save, false);
	if (SPI_execute_plan(SgPlanCached(NULL,
									  "SELECT 1 FROM streamguard.stream "
									  "WHERE id OPERATOR(pg_catalog.=) $1 FOR KEY SHARE",
									  1, types),
						 values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "stream lock failed");
	gone = (SPI_processed == 0);
	SgRestoreUser(&save);
	if (gone)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("stream \"%s\" does not exist", meta->name)));
}

/*
 * The stream's append lock (an advisory lock tag of ours, held to the end
 * of the transaction): appends take it in RowExclusiveLock before they
 * choose a partition, alter_stream in ExclusiveLock when it changes the
 * partition count (repartition.c), so that every event appended under the
 * old count has a lower seq in its partition than any appended under the
 * new one.  Returns false when the metadata changed while we waited: the
 * caller then looks the stream up again (StreamLookup) before it appends.
 */
#define SG_LOCKTAG_APPEND 0x5348

bool
StreamLockAppend(SgStreamMeta *meta)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) meta->stream_id, 0, SG_LOCKTAG_APPEND);
	if (LockAcquire(&tag, RowExclusiveLock, false, false) != LOCKACQUIRE_OK)
		return true;			/* held since an earlier append of ours */
	return HorizonRefValid(meta->ref, MyDatabaseId, meta->stream_id) &&
		HorizonGeneration(meta->ref.slot) == meta->generation;
}

void
StreamLockAppendExclusive(int32 stream_id)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) stream_id, 0, SG_LOCKTAG_APPEND);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
}

/*
 * Does this transaction hold the stream's append lock, shared by appenders
 * (StreamLockAppend) or exclusively (StreamLockAppendExclusive)?  For the
 * assertions of the callers of horizon*.c that rely on it: taking seqs
 * (HorizonAssignSeqs, horizon_seq.c) and moving a stream's partition
 * entries (HorizonGrowStream, horizon.c).
 */
bool
StreamAppendLockHeld(int32 stream_id, bool exclusive)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) stream_id, 0, SG_LOCKTAG_APPEND);
	return LockHeldByMe(&tag, exclusive ? ExclusiveLock : RowExclusiveLock);
}

/* a partition number of this stream, or a clear error */
void
StreamCheckPartition(SgStreamMeta *meta, int32 partition)
{
	if (partition < 0 || partition >= meta->nparts)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("partition %d is out of range for stream \"%s\"", partition, meta->name),
				 errdetail("The stream has partitions 0 to %d.", meta->nparts - 1)));
}

void
StreamSegmentRange(SgStreamMeta *meta, int32 *min_seg, int32 *cur_seg)
{
	HorizonSegments(meta->ref.slot, min_seg, cur_seg);
}
