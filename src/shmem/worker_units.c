/*-------------------------------------------------------------------------
 *
 * worker_units.c
 *		Background worker slots as a server resource: the worker units
 *		streamguard's dynamic workers take, capped per database and per
 *		role, under a reserve it never touches; the worker_slots view.
 *
 * Background worker slots (max_worker_processes) are shared by the whole
 * server: parallel query, logical replication, other extensions and every
 * database's streamguard workers draw from one pool.  One role's
 * pipelines with many workers must not take all of it.  So before a
 * maintenance worker starts a pipeline worker or a backfill worker it
 * claims a unit here, and the claim is refused when
 *
 *	- the server budget is spent: streamguard (the launcher, one
 *	  maintenance worker per database, and the claims) never holds more
 *	  than max_worker_processes minus streamguard.reserved_worker_processes;
 *	- the database's claims reached streamguard.database_max_workers;
 *	- the owning role's claims, over all databases, reached
 *	  streamguard.role_max_workers (superusers are exempt from this one).
 *
 * A refused claim leaves the pipeline or backfill waiting, with the
 * reason in its status; the maintenance worker tries again every round.
 * Maintenance workers and the launcher take no claim (one per database,
 * needed for anything to run) but count against the budget.
 *
 * Shared state: an array of claims, one per dynamic worker started or
 * being started, max_worker_processes long (there cannot be more such
 * workers).  A claim records the maintenance worker that made it; that
 * worker releases it once it sees its worker stopped, or, at its own exit,
 * all of its claims.  A crash restart empties the array.
 *
 * LOCKS.  The struct (SgWorkerUnits, its SgWorkerClaim array) is private
 * to this file.  The "streamguard worker units" LWLock protects it;
 * nothing else is locked while it is held, and no catalog is read under
 * it:
 *	- every field of a claim (dbid, roleid, kind, object_id, worker,
 *	  holder) is written only with the lock held exclusively
 *	  (WorkerUnitClaim, WorkerUnitRelease, sg_units_release_holder at a
 *	  maintenance worker's exit); the view copies the array with it
 *	  shared;
 *	- nclaims is written once, when the struct is made, and read without
 *	  the lock.
 *
 * Calls up: none.  The launcher and the maintenance workers count against
 * the budget; how many maintenance workers run is read from the
 * launcher's mailboxes (launcher_mailbox.c's LauncherRunningWorkers, with
 * the "streamguard launcher" LWLock shared, never while the worker units'
 * lock is held).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/dbcommands.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/lsyscache.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/tuplestore.h"

#include "core/util.h"
#include "shmem/launcher_mailbox.h"
#include "shmem/worker_units.h"

PG_FUNCTION_INFO_V1(sg_worker_slots);

int			sg_reserved_worker_processes = -1;
int			sg_database_max_workers = -1;
int			sg_role_max_workers = -1;

typedef struct SgWorkerClaim
{
	Oid			dbid;			/* InvalidOid: free */
	Oid			roleid;			/* owner of the pipeline or capture */
	SgUnitKind	kind;
	int32		object_id;		/* pipeline or capture id */
	int32		worker;			/* which worker of the pipeline */
	pid_t		holder;			/* the maintenance worker that claimed it */
} SgWorkerClaim;

typedef struct SgWorkerUnits
{
	LWLock	   *lock;
	int			nclaims;		/* length of claims[] */
	SgWorkerClaim claims[FLEXIBLE_ARRAY_MEMBER];
} SgWorkerUnits;

static SgWorkerUnits *sg_units = NULL;
static bool sg_units_exit_registered = false;

static int
sg_units_size(void)
{
	return max_worker_processes;
}

Size
WorkerUnitsShmemSize(void)
{
	return add_size(offsetof(SgWorkerUnits, claims),
					mul_size(sg_units_size(), sizeof(SgWorkerClaim)));
}

void
WorkerUnitsShmemRequest(void)
{
	RequestAddinShmemSpace(WorkerUnitsShmemSize());
	RequestNamedLWLockTranche("streamguard worker units", 1);
}

void
WorkerUnitsShmemInit(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	sg_units = ShmemInitStruct("streamguard worker units", WorkerUnitsShmemSize(), &found);
	if (!found)
	{
		memset(sg_units, 0, WorkerUnitsShmemSize());
		sg_units->lock = &(GetNamedLWLockTranche("streamguard worker units"))->lock;
		sg_units->nclaims = sg_units_size();
	}
	LWLockRelease(AddinShmemInitLock);
}

/* ------------------------------------------------------------- limits */

/* the slots streamguard leaves to PostgreSQL and everyone else */
int
WorkerUnitsReserve(void)
{
	if (sg_reserved_worker_processes >= 0)
		return Min(sg_reserved_worker_processes, max_worker_processes);
	return max_worker_processes / 4;
}

/* the slots streamguard may hold at most, its launcher and maintenance workers included */
int
WorkerUnitsBudget(void)
{
	return Max(max_worker_processes - WorkerUnitsReserve(), 0);
}

int
WorkerUnitsDatabaseCap(void)
{
	if (sg_database_max_workers >= 0)
		return sg_database_max_workers;
	return Max(WorkerUnitsBudget() * 3 / 4, 1);
}

int
WorkerUnitsRoleCap(void)
{
	if (sg_role_max_workers >= 0)
		return sg_role_max_workers;
	return Max(WorkerUnitsBudget() / 2, 1);
}

/*
 * create_pipeline / alter_pipeline: refuse a worker count that the caps
 * could never let run (the budget less the launcher and this database's
 * maintenance worker, the database cap, the role cap).  A count that fits
 * but finds the caps full now waits for a slot instead.
 */
void
WorkerUnitsCheckCouldRun(Oid owner, int32 workers)
{
	int			budget = WorkerUnitsBudget() - 2;
	int			dbcap = WorkerUnitsDatabaseCap();
	int			rolecap = WorkerUnitsRoleCap();
	const char *what = NULL;
	int			limit = 0;
	const char *guc = NULL;

	if (workers > budget)
	{
		what = "the background worker slots streamguard may use";
		limit = Max(budget, 0);
		guc = "max_worker_processes or lower streamguard.reserved_worker_processes";
	}
	else if (workers > dbcap)
	{
		what = "the per-database cap";
		limit = dbcap;
		guc = "streamguard.database_max_workers";
	}
	else if (workers > rolecap && !superuser_arg(owner))
	{
		what = "the per-role cap";
		limit = rolecap;
		guc = "streamguard.role_max_workers";
	}
	if (what == NULL)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("a pipeline with %d workers could never run all of them", workers),
			 errdetail("%s is %d background workers.", what, limit),
			 errhint("Ask for fewer workers, or have a superuser raise %s.", guc)));
}

/* ------------------------------------------------------------- claims */

static void
sg_units_release_holder(int code, Datum arg)
{
	int			i;

	if (sg_units == NULL)
		return;
	LWLockAcquire(sg_units->lock, LW_EXCLUSIVE);
	for (i = 0; i < sg_units->nclaims; i++)
		if (sg_units->claims[i].holder == MyProcPid)
			sg_units->claims[i].dbid = InvalidOid;
	LWLockRelease(sg_units->lock);
}

/*
 * Claim a worker unit for worker `worker` of pipeline or capture
 * `object_id` of this database, owned by `roleid`.  True if the worker may
 * start (the caller releases the claim should the start fail); false, with
 * the reason in why[], if a cap is full.  Claiming what one already holds
 * succeeds.  Runs in a maintenance worker, in a transaction.
 */
bool
WorkerUnitClaim(SgUnitKind kind, Oid roleid, int32 object_id, int32 worker,
				char *why, size_t whylen)
{
	bool		exempt = superuser_arg(roleid);
	int			others = 1 + LauncherRunningWorkers();
	int			budget = WorkerUnitsBudget();
	int			dbcap = WorkerUnitsDatabaseCap();
	int			rolecap = WorkerUnitsRoleCap();
	int			total = 0,
				mydb = 0,
				myrole = 0;
	SgWorkerClaim *free_claim = NULL;
	int			i;

	if (!sg_units_exit_registered)
	{
		before_shmem_exit(sg_units_release_holder, (Datum) 0);
		sg_units_exit_registered = true;
	}
	LWLockAcquire(sg_units->lock, LW_EXCLUSIVE);
	for (i = 0; i < sg_units->nclaims; i++)
	{
		SgWorkerClaim *c = &sg_units->claims[i];

		if (c->dbid == InvalidOid)
		{
			if (free_claim == NULL)
				free_claim = c;
			continue;
		}
		if (c->dbid == MyDatabaseId && c->kind == kind &&
			c->object_id == object_id && c->worker == worker)
		{
			c->holder = MyProcPid;
			LWLockRelease(sg_units->lock);
			return true;
		}
		total++;
		if (c->dbid == MyDatabaseId)
			mydb++;
		if (c->roleid == roleid)
			myrole++;
	}
	/* the narrowest cap first: it still holds when the wider ones free up */
	if (!exempt && myrole >= rolecap)
		snprintf(why, whylen, "per-role cap %d reached", rolecap);
	else if (mydb >= dbcap)
		snprintf(why, whylen, "per-database cap %d reached", dbcap);
	else if (free_claim == NULL || total + others >= budget)
		snprintf(why, whylen, "server cap %d reached (max_worker_processes %d less streamguard.reserved_worker_processes %d)",
				 budget, max_worker_processes, WorkerUnitsReserve());
	else
	{
		free_claim->dbid = MyDatabaseId;
		free_claim->roleid = roleid;
		free_claim->kind = kind;
		free_claim->object_id = object_id;
		free_claim->worker = worker;
		free_claim->holder = MyProcPid;
		LWLockRelease(sg_units->lock);
		return true;
	}
	LWLockRelease(sg_units->lock);
	return false;
}

/* the worker of a claim stopped, or never started */
void
WorkerUnitRelease(SgUnitKind kind, int32 object_id, int32 worker)
{
	int			i;

	LWLockAcquire(sg_units->lock, LW_EXCLUSIVE);
	for (i = 0; i < sg_units->nclaims; i++)
	{
		SgWorkerClaim *c = &sg_units->claims[i];

		if (c->dbid == MyDatabaseId && c->kind == kind &&
			c->object_id == object_id && c->worker == worker)
			c->dbid = InvalidOid;
	}
	LWLockRelease(sg_units->lock);
}

/* ------------------------------------------------------------- view */

typedef struct SgUnitCount
{
	Oid			oid;
	int			pipeline;
	int			backfill;
} SgUnitCount;

static int
sg_count_into(SgUnitCount *counts, int n, Oid oid, SgUnitKind kind)
{
	int			i;

	for (i = 0; i < n; i++)
		if (counts[i].oid == oid)
			break;
	if (i == n)
	{
		counts[n].oid = oid;
		counts[n].pipeline = counts[n].backfill = 0;
		n++;
	}
	if (kind == SG_UNIT_PIPELINE)
		counts[i].pipeline++;
	else
		counts[i].backfill++;
	return n;
}

static void
sg_put_row(ReturnSetInfo *rsinfo, const char *scope, const char *name,
		   int pipeline, int backfill, int other, int cap, int reserved)
{
	Datum		values[7];
	bool		nulls[7] = {false};

	values[0] = CStringGetTextDatum(scope);
	values[1] = name ? CStringGetTextDatum(name) : (Datum) 0;
	nulls[1] = (name == NULL);
	values[2] = Int32GetDatum(pipeline);
	values[3] = Int32GetDatum(backfill);
	values[4] = Int32GetDatum(pipeline + backfill + other);
	values[5] = Int32GetDatum(cap);
	nulls[5] = (cap < 0);
	values[6] = Int32GetDatum(reserved);
	nulls[6] = (reserved < 0);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * _worker_slots() -> (scope, name, pipeline_workers, backfill_workers,
 *		workers, cap, reserved): the server's row, one per database and
 *		one per role holding units.  Counts and names of databases and
 *		roles only (both are public in pg_database and pg_roles); which
 *		pipelines hold the units shows in each database's pipelines view,
 *		to whom may see them.
 */
Datum
sg_worker_slots(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			size;
	SgWorkerClaim *copy;
	SgUnitCount *dbs;
	SgUnitCount *roles;
	int			ndbs = 0,
				nroles = 0,
				npipe = 0,
				nbackfill = 0;
	int			others;
	int			i;

	/* before touching shared memory, which exists only when preloaded */
	StreamguardCheckLoaded();
	size = sg_units->nclaims;
	copy = palloc(sizeof(SgWorkerClaim) * size);
	dbs = palloc(sizeof(SgUnitCount) * size);
	roles = palloc(sizeof(SgUnitCount) * size);
	others = 1 + LauncherRunningWorkers();
	InitMaterializedSRF(fcinfo, 0);
	LWLockAcquire(sg_units->lock, LW_SHARED);
	memcpy(copy, sg_units->claims, sizeof(SgWorkerClaim) * size);
	LWLockRelease(sg_units->lock);

	for (i = 0; i < size; i++)
	{
		if (copy[i].dbid == InvalidOid)
			continue;
		if (copy[i].kind == SG_UNIT_PIPELINE)
			npipe++;
		else
			nbackfill++;
		ndbs = sg_count_into(dbs, ndbs, copy[i].dbid, copy[i].kind);
		nroles = sg_count_into(roles, nroles, copy[i].roleid, copy[i].kind);
	}
	/* the server: its launcher and maintenance workers count too */
	sg_put_row(rsinfo, "server", NULL, npipe, nbackfill, others,
			   WorkerUnitsBudget(), WorkerUnitsReserve());
	for (i = 0; i < ndbs; i++)
	{
		char	   *name = get_database_name(dbs[i].oid);

		sg_put_row(rsinfo, "database", name ? name : psprintf("%u", dbs[i].oid),
				   dbs[i].pipeline, dbs[i].backfill, 0, WorkerUnitsDatabaseCap(), -1);
	}
	for (i = 0; i < nroles; i++)
	{
		char	   *name = GetUserNameFromId(roles[i].oid, true);

		sg_put_row(rsinfo, "role", name ? name : psprintf("%u", roles[i].oid),
				   roles[i].pipeline, roles[i].backfill, 0,
				   superuser_arg(roles[i].oid) ? -1 : WorkerUnitsRoleCap(), -1);
	}
	return (Datum) 0;
}
