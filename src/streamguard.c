/*-------------------------------------------------------------------------
 *
 * streamguard.c
 *		Module load: GUCs, shared-memory requests, the launcher's
 *		registration, and the precondition checks every SQL entry point
 *		runs first.
 *
 * streamguard must be in shared_preload_libraries: the readable horizon
 * lives in shared memory sized at startup, and the launcher is a static
 * background worker.  Loaded any other way, the SQL functions refuse to
 * run (SgCheckLoaded) instead of silently giving weaker guarantees.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/guc.h"

#include "pipeline.h"
#include "remote.h"
#include "streamguard.h"

SG_MODULE_MAGIC;

int			sg_max_streams = 256;
int			sg_max_partitions = 4096;
int			sg_max_xact_partitions = 1024;
int			sg_maintenance_naptime_ms = 1000;
int			sg_launcher_naptime_ms = 10000;
int			sg_role_max_streams = 64;
int			sg_role_max_partitions = 1024;
int			sg_role_max_pipelines = 16;
int			sg_batch_history = 1000;
int			sg_backfill_chunk_rows = 1000;
int			sg_backfill_naptime_ms = 0;
int			sg_max_backfill_workers = 2;

/* set in a pipeline worker while it runs (0 elsewhere) */
int32		SgRunningPipelineId = 0;
int32		SgRunningSourceStream = 0;
bool		SgRunningAllowSourceAppend = false;


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
}

void
_PG_init(void)
{
	BackgroundWorker worker;

	/* the shared-memory layer's callbacks into the layers above it */
	HorizonCommitWake = PipelineWakeStream;
	HorizonSeqLoader = StreamMaxSeq;

	if (!process_shared_preload_libraries_in_progress)
		return;

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
	DefineCustomIntVariable("streamguard.max_group_members",
							"Maximum number of consumer group members, over all databases.",
							"Each member of a consumer group (poll with a member name) needs one entry while its lease runs.",
							&sg_max_group_members, 1024, 1, 1000000,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("streamguard.group_lease",
							"How long a consumer group member stays a member after its last poll.",
							"A member that does not poll again within its lease loses the partitions it does not hold in an open transaction.",
							&sg_group_lease_ms, 10000, 100, 3600 * 1000,
							PGC_USERSET, GUC_UNIT_MS, NULL, NULL, NULL);
	MarkGUCPrefixReserved("streamguard");

	OwnershipInstallHooks();

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = sg_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = sg_shmem_startup;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 5;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "streamguard");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "LauncherMain");
	snprintf(worker.bgw_name, BGW_MAXLEN, "streamguard launcher");
	snprintf(worker.bgw_type, BGW_MAXLEN, "streamguard launcher");
	RegisterBackgroundWorker(&worker);

	SgLoaded = true;
}
