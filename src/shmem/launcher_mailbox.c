/*-------------------------------------------------------------------------
 *
 * launcher_mailbox.c
 *		The launcher's shared state: its pid and a mailbox per database
 *		between the launcher (workers/launcher.c), backends and maintenance
 *		workers.
 *
 * Shared state (LauncherShmemInit): the launcher's pid and a hash
 * table keyed by database OID that serves as a mailbox between the
 * launcher, backends and maintenance workers: a backend sets `wanted` (at
 * commit of the call that needs a worker, LauncherWake), a worker records
 * its pid while it runs (LauncherRegisterWorker) and, when the extension
 * is absent, when to probe again (LauncherMarkAbsent).  The launcher
 * collects `wanted` and the probe time into its own backend-local hash
 * table (LauncherCollect) and deletes entries that carry nothing
 * (LauncherPruneMailboxes), so the shared table holds about one entry per
 * running worker.  It is sized from max_worker_processes but may grow
 * into spare shared memory; should an entry still not fit, the backend
 * sets `all_wanted` and the launcher probes every database once
 * (LauncherTakeAllWanted).  There is no limit on the number of databases.
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
 * Calls: none of ours.  The launcher, the maintenance workers, the SQL
 * calls that need a worker (LauncherWake) and worker_units.c (which counts
 * the running maintenance workers) call in.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#include "core/compat.h"
#include "shmem/launcher_mailbox.h"

#define SG_ABSENT_RETRY_MS	60000

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

/* the launcher's pid, recorded by the launcher at its start */
void
LauncherSetPid(pid_t pid)
{
	LWLockAcquire(sg_launcher->lock, LW_EXCLUSIVE);
	sg_launcher->launcher_pid = pid;
	LWLockRelease(sg_launcher->lock);
}

/*
 * Whether an entry did not fit since the launcher last asked (it then
 * probes every database once); the launcher collects it.
 */
bool
LauncherTakeAllWanted(void)
{
	bool		all;

	LWLockAcquire(sg_launcher->lock, LW_EXCLUSIVE);
	all = sg_launcher->all_wanted;
	sg_launcher->all_wanted = false;
	LWLockRelease(sg_launcher->lock);
	return all;
}

/*
 * The launcher collects what backends and workers left in database
 * `dbid`'s mailbox: its wish ORed into *wanted, its probe time (if it has
 * one) into *retry_after, and the entry removed.  True, with nothing
 * collected, while a worker the launcher did not start (a previous
 * launcher did) still runs there.
 */
bool
LauncherCollect(Oid dbid, bool *wanted, TimestampTz *retry_after)
{
	SgLauncherDb *e;

	LWLockAcquire(sg_launcher->lock, LW_EXCLUSIVE);
	e = hash_search(sg_launcher_dbs, &dbid, HASH_FIND, NULL);
	if (e != NULL && e->worker_pid != 0)
	{
		/* a worker we did not start (a previous launcher did) still runs */
		LWLockRelease(sg_launcher->lock);
		return true;
	}
	if (e != NULL)
	{
		/* collected: the entry carries nothing more */
		*wanted |= e->wanted;
		if (e->retry_after != 0)
			*retry_after = e->retry_after;
		hash_search(sg_launcher_dbs, &dbid, HASH_REMOVE, NULL);
	}
	LWLockRelease(sg_launcher->lock);
	return false;
}

/*
 * Remove the shared entries of databases the launcher does not know (not
 * in `known`, the launcher's own hash table keyed by database OID) with
 * no worker.
 */
void
LauncherPruneMailboxes(HTAB *known)
{
	HASH_SEQ_STATUS seq;
	SgLauncherDb *e;

	LWLockAcquire(sg_launcher->lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, sg_launcher_dbs);
	while ((e = hash_seq_search(&seq)) != NULL)
		if (e->worker_pid == 0 && hash_search(known, &e->dbid, HASH_FIND, NULL) == NULL)
			hash_search(sg_launcher_dbs, &e->dbid, HASH_REMOVE, NULL);
	LWLockRelease(sg_launcher->lock);
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
