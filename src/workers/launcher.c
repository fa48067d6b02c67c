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
 * Shared state: the launcher's pid and the per-database mailboxes between
 * the launcher, backends and maintenance workers are in shared memory's
 * layer (shmem/launcher_mailbox.c, which owns their structs and lock): a
 * backend asks for a worker there (LauncherWake, at commit of the call
 * that needs one), a worker records its pid while it runs and, when the
 * extension is absent, when to probe again.  The launcher collects the
 * wishes and the probe times into its own backend-local hash table (one
 * entry per database, pruned against pg_database each round) and has the
 * mailboxes that carry nothing deleted (LauncherCollect,
 * LauncherPruneMailboxes).  There is no limit on the number of databases.
 *
 * LOCKS.  None here: the launcher's local hash table is its own, and the
 * mailbox functions take the "streamguard launcher" LWLock themselves.
 *
 * Calls up: none.
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
#include "shmem/launcher_mailbox.h"
#include "shmem/pipeline_slots.h"
#include "workers/launcher.h"

PGDLLEXPORT void LauncherMain(Datum arg);

int			sg_launcher_naptime_ms = 10000;

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
	bool		wanted = all;

	/* a worker we did not start (a previous launcher did) still runs */
	if (LauncherCollect(l->dbid, &wanted, &l->retry_after))
		return false;
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

	hash_seq_init(&seq, local);
	while ((l = hash_seq_search(&seq)) != NULL)
	{
		if (l->round == round)
			continue;
		if (l->handle != NULL)
			pfree(l->handle);
		hash_search(local, &l->dbid, HASH_REMOVE, NULL);
	}

	LauncherPruneMailboxes(local);
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
	LauncherSetPid(MyProcPid);

	for (;;)
	{
		Relation	rel;
		TableScanDesc scan;
		HeapTuple	tup;
		List	   *dbs = NIL;
		ListCell   *lc;
		bool		all;
		TimestampTz now = GetCurrentTimestamp();

		SgExitIfPostmasterDead();
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

		all = LauncherTakeAllWanted();

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
