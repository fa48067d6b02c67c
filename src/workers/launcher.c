/*-------------------------------------------------------------------------
 *
 * launcher.c
 *		The launcher: one maintenance worker per database that has the
 *		extension.
 *
 * The launcher is a static background worker (registered at preload) that
 * is connected to no database.  Every streamguard.launcher_naptime, or at
 * once when a backend asks (LauncherWake, e.g. create_stream),
 * it starts one maintenance worker per database that has none; a worker
 * that finds no streamguard extension in its database exits and the
 * launcher leaves that database alone for a minute unless asked again.
 *
 * Shared state (LauncherShmemInit): the launcher's pid and a hash
 * table keyed by database OID that serves as a mailbox between the
 * launcher, backends and maintenance workers: a backend sets `wanted` (at
 * commit of the call that needs a worker), a worker records its pid while
 * it runs and, when the extension is absent, when to probe again.  The
 * launcher collects `wanted` and the probe time into its own backend-local
 * hash table (one entry per database, pruned against pg_database each
 * round) and deletes entries that carry nothing, so the shared table holds
 * about one entry per running worker.  It is sized from
 * max_worker_processes but may grow into spare shared memory; should an
 * entry still not fit, the backend sets `all_wanted` and the launcher
 * probes every database once.  There is no limit on the number of
 * databases.
 *
 * LOCKS.  The structs (SgLauncherShared, the SgLauncherDb entries of the
 * shared hash table) are private to this file.  SgLauncherShared->lock
 * (LWLock, "streamguard launcher") protects all of it:
 *	- launcher_pid is written by the launcher at its start, all_wanted by a
 *	  backend whose entry did not fit and by the launcher collecting it,
 *	  both with the lock held exclusively; a backend reads launcher_pid
 *	  with it held (sg_wake_now);
 *	- the hash table and every field of its entries (worker_pid, wanted,
 *	  retry_after) are written only with the lock held exclusively: entries
 *	  are made by sg_launcher_entry_locked, which asserts it, and removed by
 *	  the launcher; LauncherRunningWorkers reads them with the lock shared.
 *
 * Calls up: none.  The layers below that need the launcher get it through
 * callbacks installed by _PG_init: worker_units.c counts the running
 * maintenance workers (LauncherRunningWorkers), capture.c wakes the
 * database's maintenance worker at commit (LauncherWake).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "catalog/pg_database.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "core/compat.h"
#include "core/util.h"
#include "shmem/horizon.h"
#include "shmem/pipeline_slots.h"
#include "workers/launcher.h"

PGDLLEXPORT void LauncherMain(Datum arg);

#define SG_ABSENT_RETRY_MS	60000

int			sg_launcher_naptime_ms = 10000;

/* the shared mailbox entry of a database */
typedef struct SgLauncherDb
{
	Oid			dbid;			/* hash key */
	pid_t		worker_pid;		/* the database's maintenance worker, or 0 */
	bool		wanted;			/* a backend asked for a worker here */
	TimestampTz retry_after;	/* extension absent: probe again then, or 0 */
} SgLauncherDb;

typedef struct SgLauncherShared
{
	LWLock	   *lock;
	pid_t		launcher_pid;
	bool		all_wanted;		/* an entry did not fit: probe every database */
} SgLauncherShared;

static SgLauncherShared *sg_launcher = NULL;
static HTAB *sg_launcher_dbs = NULL;
static bool sg_wake_at_commit = false;
static bool sg_wake_callback_registered = false;

static int
sg_launcher_hash_size(void)
{
	return max_worker_processes + 64;
}

Size
LauncherShmemSize(void)
{
	return add_size(MAXALIGN(sizeof(SgLauncherShared)),
					hash_estimate_size(sg_launcher_hash_size(), sizeof(SgLauncherDb)));
}

void
LauncherShmemRequest(void)
{
	RequestAddinShmemSpace(LauncherShmemSize());
	RequestNamedLWLockTranche("streamguard launcher", 1);
}

void
LauncherShmemInit(void)
{
	bool		found;
	HASHCTL		ctl;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	sg_launcher = ShmemInitStruct("streamguard launcher", sizeof(SgLauncherShared), &found);
	if (!found)
	{
		memset(sg_launcher, 0, sizeof(SgLauncherShared));
		sg_launcher->lock = &(GetNamedLWLockTranche("streamguard launcher"))->lock;
	}
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(SgLauncherDb);
	sg_launcher_dbs = ShmemInitHash("streamguard launcher databases",
									sg_launcher_hash_size(), sg_launcher_hash_size(),
									&ctl, HASH_ELEM | HASH_BLOBS);
	LWLockRelease(AddinShmemInitLock);
}

/* The mailbox entry of a database, created if need be; NULL if it cannot be. */
static SgLauncherDb *
sg_launcher_entry_locked(Oid dbid)
{
	SgLauncherDb *e;
	bool		found;

	Assert(LWLockHeldByMeInMode(sg_launcher->lock, LW_EXCLUSIVE));
	e = hash_search(sg_launcher_dbs, &dbid, HASH_ENTER_NULL, &found);
	if (e == NULL)
	{
		sg_launcher->all_wanted = true;
		return NULL;
	}
	if (!found)
	{
		e->worker_pid = 0;
		e->wanted = false;
		e->retry_after = 0;
	}
	return e;
}

static void
sg_wake_now(void)
{
	SgLauncherDb *e;
	pid_t		pid;
	pid_t		db_pid = 0;

	LWLockAcquire(sg_launcher->lock, LW_EXCLUSIVE);
	e = sg_launcher_entry_locked(MyDatabaseId);
	if (e != NULL)
	{
		e->wanted = true;
		e->retry_after = 0;
		db_pid = e->worker_pid;
	}
	pid = sg_launcher->launcher_pid;
	LWLockRelease(sg_launcher->lock);
	if (db_pid > 0)
		kill(db_pid, SIGUSR1);	/* the database's worker runs a round now */
	else if (pid > 0)
		kill(pid, SIGUSR1);		/* the launcher starts one */
}

static void
sg_wake_xact_callback(XactEvent event, void *arg)
{
	if (!sg_wake_at_commit)
		return;
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:
			sg_wake_at_commit = false;
			sg_wake_now();
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			sg_wake_at_commit = false;
			break;
		default:
			break;
	}
}

/*
 * Ask the launcher to make sure this database has a maintenance worker,
 * once the current transaction commits: a worker started earlier would
 * not see what the transaction created (the extension, a stream, a
 * pipeline) and could conclude there is nothing to do.
 */
void
LauncherWake(void)
{
	if (!sg_wake_callback_registered)
	{
		RegisterXactCallback(sg_wake_xact_callback, NULL);
		sg_wake_callback_registered = true;
	}
	sg_wake_at_commit = true;
}

/* the launcher's own view of a database */
typedef struct LauncherLocal
{
	Oid			dbid;			/* hash key */
	BackgroundWorkerHandle *handle;
	TimestampTz retry_after;	/* extension absent: probe again then */
	uint64		round;			/* last round that saw it in pg_database */
} LauncherLocal;


static void
sg_launch_worker(Oid dbid, BackgroundWorkerHandle **handle)
{
	char		name[BGW_MAXLEN];

	snprintf(name, sizeof(name), "streamguard maintenance %u", dbid);
	*handle = SgStartDynamicWorker("MaintenanceWorkerMain", "streamguard maintenance", name,
								   ObjectIdGetDatum(dbid), dbid);
}

/*
 * Free the shared-memory slots (streams, pipelines) of databases that no
 * longer exist: DROP DATABASE runs no code of ours.  In a transaction.
 */
static void
sg_prune_dropped_databases(void)
{
	Oid			held[64];
	int			nheld,
				i;

	nheld = HorizonSlotDatabases(held, lengthof(held));
	nheld += PipelineSlotDatabases(held + nheld, lengthof(held) - nheld);
	for (i = 0; i < nheld; i++)
	{
		if (SearchSysCacheExists1(DATABASEOID, ObjectIdGetDatum(held[i])))
			continue;
		HorizonFreeDatabase(held[i], InvalidOid);
		PipelineFreeDatabase(held[i]);
	}
}

/*
 * Decide whether database `dbid` needs a maintenance worker started now,
 * collecting what backends and workers left in its shared entry.
 */
static bool
sg_launcher_wants(LauncherLocal *l, bool all, TimestampTz now)
{
	SgLauncherDb *e;
	bool		wanted = all;

	LWLockAcquire(sg_launcher->lock, LW_EXCLUSIVE);
	e = hash_search(sg_launcher_dbs, &l->dbid, HASH_FIND, NULL);
	if (e != NULL && e->worker_pid != 0)
	{
		/* a worker we did not start (a previous launcher did) still runs */
		LWLockRelease(sg_launcher->lock);
		return false;
	}
	if (e != NULL)
	{
		/* collected: the entry carries nothing more */
		wanted |= e->wanted;
		if (e->retry_after != 0)
			l->retry_after = e->retry_after;
		hash_search(sg_launcher_dbs, &l->dbid, HASH_REMOVE, NULL);
	}
	LWLockRelease(sg_launcher->lock);
	return wanted || l->retry_after <= now;
}

/*
 * Forget databases that are gone: local entries not seen this round, and
 * shared entries of databases the launcher does not know with no worker.
 */
static void
sg_launcher_prune(HTAB *local, uint64 round)
{
	HASH_SEQ_STATUS seq;
	LauncherLocal *l;
	SgLauncherDb *e;

	hash_seq_init(&seq, local);
	while ((l = hash_seq_search(&seq)) != NULL)
	{
		if (l->round == round)
			continue;
		if (l->handle != NULL)
			pfree(l->handle);
		hash_search(local, &l->dbid, HASH_REMOVE, NULL);
	}

	LWLockAcquire(sg_launcher->lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, sg_launcher_dbs);
	while ((e = hash_seq_search(&seq)) != NULL)
		if (e->worker_pid == 0 && hash_search(local, &e->dbid, HASH_FIND, NULL) == NULL)
			hash_search(sg_launcher_dbs, &e->dbid, HASH_REMOVE, NULL);
	LWLockRelease(sg_launcher->lock);
}

void
LauncherMain(Datum arg)
{
	HTAB	   *local;
	HASHCTL		ctl;
	MemoryContext round_cxt;
	uint64		round = 0;

	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("streamguard launcher");

	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(LauncherLocal);
	ctl.hcxt = TopMemoryContext;
	local = hash_create("streamguard launcher databases", 64, &ctl,
						HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	round_cxt = AllocSetContextCreate(TopMemoryContext, "streamguard launcher round",
									  ALLOCSET_DEFAULT_SIZES);
	LWLockAcquire(sg_launcher->lock, LW_EXCLUSIVE);
	sg_launcher->launcher_pid = MyProcPid;
	LWLockRelease(sg_launcher->lock);

	for (;;)
	{
		Relation	rel;
		TableScanDesc scan;
		HeapTuple	tup;
		List	   *dbs = NIL;
		ListCell   *lc;
		bool		all;
		TimestampTz now = GetCurrentTimestamp();

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		MemoryContextReset(round_cxt);
		round++;

		/* the databases that accept connections */
		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		PushActiveSnapshot(GetTransactionSnapshot());
		rel = table_open(DatabaseRelationId, AccessShareLock);
		scan = table_beginscan_catalog(rel, 0, NULL);
		while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
		{
			Form_pg_database db = (Form_pg_database) GETSTRUCT(tup);

			if (db->datallowconn && !db->datistemplate)
			{
				MemoryContext old = MemoryContextSwitchTo(round_cxt);

				dbs = lappend_oid(dbs, db->oid);
				MemoryContextSwitchTo(old);
			}
		}
		table_endscan(scan);
		table_close(rel, AccessShareLock);
		sg_prune_dropped_databases();
		PopActiveSnapshot();
		CommitTransactionCommand();

		LWLockAcquire(sg_launcher->lock, LW_EXCLUSIVE);
		all = sg_launcher->all_wanted;
		sg_launcher->all_wanted = false;
		LWLockRelease(sg_launcher->lock);

		foreach(lc, dbs)
		{
			Oid			dbid = lfirst_oid(lc);
			LauncherLocal *l;
			bool		found;
			pid_t		pid;

			CHECK_FOR_INTERRUPTS();
			l = hash_search(local, &dbid, HASH_ENTER, &found);
			if (!found)
			{
				l->handle = NULL;
				l->retry_after = 0;
			}
			l->round = round;
			if (l->handle != NULL &&
				GetBackgroundWorkerPid(l->handle, &pid) != BGWH_STOPPED)
				continue;		/* running or starting */
			if (l->handle != NULL)
			{
				pfree(l->handle);
				l->handle = NULL;
			}
			if (sg_launcher_wants(l, all, now))
			{
				l->retry_after = 0;
				sg_launch_worker(dbid, &l->handle);
			}
		}
		sg_launcher_prune(local, round);

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sg_launcher_naptime_ms, sg_wait_event(SG_WE_LAUNCHER));
		ResetLatch(MyLatch);
	}
}

/*
 * A maintenance worker found no extension in its database: probe it again
 * in a minute, unless someone asks for it before.
 */
void
LauncherMarkAbsent(Oid dbid)
{
	SgLauncherDb *e;

	LWLockAcquire(sg_launcher->lock, LW_EXCLUSIVE);
	e = sg_launcher_entry_locked(dbid);
	if (e != NULL && !e->wanted)
		e->retry_after = GetCurrentTimestamp() + SG_ABSENT_RETRY_MS * (int64) 1000;
	LWLockRelease(sg_launcher->lock);
}

/* a maintenance worker's pid in its database's mailbox (0: it exits) */
void
LauncherRegisterWorker(Oid dbid, pid_t pid)
{
	SgLauncherDb *e;

	LWLockAcquire(sg_launcher->lock, LW_EXCLUSIVE);
	if (pid != 0)
		e = sg_launcher_entry_locked(dbid);
	else
		e = hash_search(sg_launcher_dbs, &dbid, HASH_FIND, NULL);
	if (e != NULL && (pid != 0 || e->worker_pid == MyProcPid))
		e->worker_pid = pid;
	LWLockRelease(sg_launcher->lock);
}

/* maintenance workers running now, over all databases */
int
LauncherRunningWorkers(void)
{
	HASH_SEQ_STATUS seq;
	SgLauncherDb *e;
	int			n = 0;

	LWLockAcquire(sg_launcher->lock, LW_SHARED);
	hash_seq_init(&seq, sg_launcher_dbs);
	while ((e = hash_seq_search(&seq)) != NULL)
		if (e->worker_pid != 0)
			n++;
	LWLockRelease(sg_launcher->lock);
	return n;
}
