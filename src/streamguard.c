/*-------------------------------------------------------------------------
 *
 * streamguard.c
 *		Module load: GUCs, shared-memory requests, the launcher's
 *		registration, and the one callback set at load (the wake-up of
 *		pipelines when appends commit).
 *
 * streamguard must be in shared_preload_libraries: the readable horizon
 * lives in shared memory sized at startup, and the launcher is a static
 * background worker.  Loaded any other way, the SQL functions refuse to
 * run (StreamguardCheckLoaded, util.c) instead of silently giving weaker
 * guarantees.
 *
 * This file only registers the GUCs: each one's variable is defined by
 * the module that reads it and declared in that module's header.  Each
 * module with shared memory requests and attaches its own; the hooks here
 * call them.  No file calls one in a layer above its own, through a
 * pointer either (docs/internals.md, "Calls between files"): the one
 * callback installed here stays within shared memory's layer.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "postmaster/postmaster.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/guc.h"

#include "api/ownership.h"
#include "api/pipeline.h"
#include "api/streams.h"
#include "api/window_api.h"
#include "capture/capture.h"
#include "catalog/sg_catalog.h"
#include "core/bounds.h"
#include "core/compat.h"
#include "core/util.h"
#include "io/remote.h"
#include "shmem/horizon.h"
#include "shmem/launcher_mailbox.h"
#include "shmem/pipeline_slots.h"
#include "shmem/worker_units.h"
#include "stream/group.h"
#include "workers/launcher.h"
#include "workers/maintenance.h"

SG_MODULE_MAGIC;



static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

void		_PG_init(void);

static void
sg_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	HorizonShmemRequest();
	LauncherShmemRequest();
	PipelineShmemRequest();
	GroupShmemRequest();
	WorkerUnitsShmemRequest();
}

static void
sg_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	HorizonShmemInit();
	LauncherShmemInit();
	PipelineShmemInit();
	GroupShmemInit();
	WorkerUnitsShmemInit();
}

/*
 * The callback horizon_xact.c calls when appends to a stream commit: the
 * pipeline slots wake that stream's pipeline workers (both in shmem/; the
 * pointer keeps the two modules' files from calling each other).
 */
static void
sg_install_callbacks(void)
{
	HorizonCommitWake = PipelineWakeStream;
}

/*
 * Every streamguard GUC, in the order they have always been defined; each
 * variable belongs to the module that reads it.
 */
static void
sg_define_gucs(void)
{
	DefineCustomIntVariable("streamguard.max_streams",
							"Maximum number of streams tracked in shared memory, over all databases.",
							"Each stream in use needs one slot; a dropped stream frees its slot.",
							&sg_max_streams, 256, 1, 65536,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.max_partitions",
							"Maximum number of stream partitions tracked in shared memory, over all streams.",
							NULL,
							&sg_max_partitions, 4096, 1, 1048576,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.max_xact_partitions",
							"Maximum number of distinct partitions one transaction may append to.",
							NULL,
							&sg_max_xact_partitions, 1024, 1, 65536,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.maintenance_naptime",
							"Time between maintenance rounds (segment rotation, retention, dedup expiry) in each database.",
							NULL,
							&sg_maintenance_naptime_ms, 1000, 100, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.launcher_naptime",
							"Time between the launcher's scans for databases that need a maintenance worker.",
							NULL,
							&sg_launcher_naptime_ms, 10000, 100, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.max_pipelines",
							"Maximum number of pipelines, over all databases.",
							"Each pipeline also needs a background worker slot (max_worker_processes).",
							&sg_max_pipelines, 64, 1, 10000,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.remote_timeout",
							"Longest wait for a remote server: connecting, and each remote statement.",
							"A remote that does not answer in time is disconnected (its own statement_timeout, set to the same value, ends the statement there); the batch is retried.",
							&sg_remote_timeout_ms, 10000, 100, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.batch_history",
							"Committed batches each pipeline keeps in its checkpoint log (streamguard.pipeline_batches).",
							"The maintenance worker deletes older entries every round.",
							&sg_batch_history, 1000, 1, 10000000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.role_max_streams",
							"Maximum number of streams one role may own in a database (-1: no limit).",
							"Superusers are exempt.  Set it per role with ALTER ROLE ... SET.",
							&sg_role_max_streams, 64, -1, INT_MAX,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.role_max_partitions",
							"Maximum number of stream partitions, over all its streams, one role may own in a database (-1: no limit).",
							"Superusers are exempt.  Set it per role with ALTER ROLE ... SET.",
							&sg_role_max_partitions, 1024, -1, INT_MAX,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.role_max_pipelines",
							"Maximum number of pipelines one role may own in a database (-1: no limit).",
							"Superusers are exempt.  Set it per role with ALTER ROLE ... SET.",
							&sg_role_max_pipelines, 16, -1, INT_MAX,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.database_max_streams",
							"Maximum number of streams in one database (-1: three quarters of streamguard.max_streams).",
							"The stream slots in shared memory are shared by every database; superusers are not exempt.  Set it per database with ALTER DATABASE ... SET.",
							&sg_database_max_streams, -1, -1, INT_MAX,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.database_max_partitions",
							"Maximum number of stream partitions, over all its streams, in one database (-1: three quarters of streamguard.max_partitions).",
							"The partition slots in shared memory are shared by every database; superusers are not exempt.  Set it per database with ALTER DATABASE ... SET.",
							&sg_database_max_partitions, -1, -1, INT_MAX,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.database_max_pipelines",
							"Maximum number of pipeline workers, over all its pipelines, in one database (-1: three quarters of streamguard.max_pipelines).",
							"The pipeline slots in shared memory (one per worker of a pipeline) are shared by every database; superusers are not exempt.  Set it per database with ALTER DATABASE ... SET.",
							&sg_database_max_pipelines, -1, -1, INT_MAX,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.backfill_chunk_rows",
							"Rows the backfill of a captured table reads, locks and appends per transaction.",
							"Writers of the rows of a chunk wait until it commits; a failed chunk is retried with half as many rows.",
							&sg_backfill_chunk_rows, 1000, 1, 1000000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.backfill_naptime",
							"Pause of a backfill worker between two chunks (0: none).",
							"Spreads a backfill's load over a longer time.",
							&sg_backfill_naptime_ms, 0, 0, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.max_backfill_workers",
							"Maximum number of backfill workers running at once in each database.",
							"0 leaves backfills to streamguard.run_backfill_chunk.",
							&sg_max_backfill_workers, 2, 0, 64,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.max_windows_per_event",
							"Maximum number of windows one event may belong to in a hopping window pipeline.",
							"A hopping window puts each event into size divided by slide windows (rounded up); create_window_pipeline refuses a window with more.  Pipelines created before a change keep their windows.",
							&sg_max_windows_per_event, SG_DEFAULT_WINDOWS_PER_EVENT, 1, SG_MAX_WINDOWS_PER_EVENT,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.max_group_members",
							"Maximum number of consumer group members, over all databases.",
							"Each member of a consumer group (poll with a member name) needs one entry while its lease runs.",
							&sg_max_group_members, 1024, 1, 1000000,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.group_lease",
							"How long a consumer group member stays a member after its last poll.",
							"A member that does not poll again within its lease loses the partitions it does not hold in an open transaction.",
							&sg_group_lease_ms, 10000, 100, 3600 * 1000,
							PGC_USERSET, GUC_UNIT_MS, GroupCheckLease, NULL, NULL);
	DefineCustomIntVariable("streamguard.max_group_lease",
							"Longest lease a consumer group member may have.",
							"A SET of streamguard.group_lease above it is refused, and a longer lease from any other source is cut to it, so that no session keeps a member entry in shared memory longer than this after its last poll.",
							&sg_max_group_lease_ms, 60000, 100, 3600 * 1000,
							PGC_SUSET, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.role_max_group_members",
							"Maximum number of consumer group member entries one role may hold at once, over all databases (-1: a quarter of streamguard.max_group_members).",
							"Superusers are exempt.  A poll that would need one more entry fails until a member of the role leaves or its lease ends.",
							&sg_role_max_group_members, -1, -1, 1000000,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.database_max_group_members",
							"Maximum number of consumer group member entries of one database at once (-1: half of streamguard.max_group_members).",
							"A poll that would need one more entry fails until a member in the database leaves or its lease ends.  Set it per database with ALTER DATABASE ... SET.",
							&sg_database_max_group_members, -1, -1, 1000000,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.reserved_worker_processes",
							"Background worker slots streamguard leaves to PostgreSQL and other extensions (-1: a quarter of max_worker_processes).",
							"streamguard's launcher, maintenance workers, pipeline workers and backfill workers together never take more than max_worker_processes less this many slots, so that parallel query, logical replication and maintenance still find workers.",
							&sg_reserved_worker_processes, -1, -1, MAX_BACKENDS,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.database_max_workers",
							"Maximum number of pipeline and backfill workers running at once in one database (-1: three quarters of the slots streamguard may use).",
							"A worker that would exceed it waits, and its pipeline says so in streamguard.pipelines, until another worker of the database stops.",
							&sg_database_max_workers, -1, -1, MAX_BACKENDS,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.role_max_workers",
							"Maximum number of pipeline and backfill workers running at once for the pipelines and captures of one role, over all databases (-1: half of the slots streamguard may use).",
							"Superusers are exempt.  A worker that would exceed it waits, and its pipeline says so in streamguard.pipelines, until another worker of the role stops.",
							&sg_role_max_workers, -1, -1, MAX_BACKENDS,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	MarkGUCPrefixReserved("streamguard");
}

static void
sg_install_shmem_hooks(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = sg_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = sg_shmem_startup;
}

/* The launcher: a static background worker, restarted 5 s after a crash. */
static void
sg_register_launcher(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 5;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "streamguard");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "LauncherMain");
	snprintf(worker.bgw_name, BGW_MAXLEN, "streamguard launcher");
	snprintf(worker.bgw_type, BGW_MAXLEN, "streamguard launcher");
	RegisterBackgroundWorker(&worker);
}

void
_PG_init(void)
{
	sg_install_callbacks();

	if (!process_shared_preload_libraries_in_progress)
		return;

	sg_define_gucs();
	OwnershipInstallHooks();
	sg_install_shmem_hooks();

	/*
	 * pg_upgrade starts both servers in binary-upgrade mode (postgres -b) to
	 * read the old catalogs and to restore them into the new cluster.  No
	 * maintenance or pipeline worker may run then: it would write to our
	 * tables while pg_upgrade dumps them, or into a cluster whose catalogs
	 * are still being restored.  Without the launcher nothing else starts
	 * a worker (and SgStartDynamicWorker refuses, should a caller try).
	 */
	if (IsBinaryUpgrade)
	{
		ereport(LOG,
				(errmsg("streamguard: binary-upgrade mode, background workers are not started")));
		SgLoaded = true;
		return;
	}

	sg_register_launcher();
	SgLoaded = true;
}
