/*-------------------------------------------------------------------------
 *
 * extension_drop.c
 *		DROP EXTENSION streamguard while the database's workers, producers
 *		and monitoring queries run: the drop never loses a deadlock.
 *
 * A drop locks each object it deletes as it finds it, in the order of the
 * dependency graph, and holds every lock until it commits.  Everything
 * else that runs takes the same relations in another order: a batch locks
 * the pipeline catalog first, then the stream's storage; a query over a
 * view locks the view, then its tables; a write into a captured table
 * locks that table, then (in the capture trigger) the stream's storage.
 * Any of them can hold one object the drop wants while it waits for one
 * the drop holds, and the deadlock detector then fails whichever side
 * checked first -- often the DROP.
 *
 * So the drop runs in a subtransaction of its own, each of its lock waits
 * bounded by a lock_timeout below deadlock_timeout: it never waits long
 * enough to be the one the detector fails, and when a wait times out, the
 * subtransaction is rolled back (all its locks let go, so the other side
 * proceeds) and the drop is tried again after a pause.  Each attempt first
 * locks the relations the drop will take, in the one order all of those
 * paths follow (sg_drop_locks), so that a wait of the drop is rarely part
 * of a cycle at all; the drop itself then finds them held.  A caller's own lock_timeout, when set, still bounds
 * the whole wait (55P03), and the wait can be cancelled at any pause.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_trigger.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "nodes/value.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "api/extension_drop.h"
#include "core/compat.h"

/* the pause between two attempts */
#define SG_DROP_PAUSE_MS	10

bool
ExtensionDropIsOurs(Node *parsetree)
{
	ListCell   *lc;

	if (!IsA(parsetree, DropStmt) ||
		((DropStmt *) parsetree)->removeType != OBJECT_EXTENSION)
		return false;
	foreach(lc, ((DropStmt *) parsetree)->objects)
	{
		Node	   *n = lfirst(lc);

		if (IsA(n, String) && strcmp(strVal(n), "streamguard") == 0)
			return true;
	}
	return false;
}

/*
 * The relations every attempt locks first, in an order that every path
 * which takes several of them follows too, so that whoever holds one the
 * drop waits for never waits for one the drop holds: the captured tables
 * (a write locks its table, then the trigger the catalog and the storage),
 * the views (a query locks the view, then its tables), the pipeline
 * catalog (a batch's first lock), the rest of the catalog, then the
 * streams' storage in streamguard_data (a batch, an append and the
 * maintenance round reach it through the catalog); by OID within each.
 * Read once, before the first attempt.
 */
typedef struct SgDropLock
{
	Oid			relid;
	LOCKMODE	mode;
} SgDropLock;

static List *
sg_drop_locks(void)
{
	List	   *locks = NIL;
	const char *sql =
		"SELECT t.tgrelid, 0 AS rank FROM pg_catalog.pg_trigger t "
		"JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) t.tgfoid "
		"JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace "
		"WHERE n.nspname OPERATOR(pg_catalog.=) 'streamguard' "
		"GROUP BY t.tgrelid "
		"UNION ALL "
		"SELECT c.oid, CASE WHEN c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['v', 'm']::pg_catalog.\"char\"[]) THEN 1 "
		"  WHEN n.nspname OPERATOR(pg_catalog.=) 'streamguard_data' THEN 4 "
		"  WHEN c.relname OPERATOR(pg_catalog.=) 'pipeline' THEN 2 ELSE 3 END "
		"FROM pg_catalog.pg_class c "
		"JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace "
		"WHERE n.nspname OPERATOR(pg_catalog.=) ANY (ARRAY['streamguard', 'streamguard_data']) "
		"  AND c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p', 'v', 'm', 'S', 'f']::pg_catalog.\"char\"[]) "
		"ORDER BY 2, 1";
	MemoryContext outer = CurrentMemoryContext;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute(sql, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not list the relations of extension \"streamguard\"");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		MemoryContext spi = MemoryContextSwitchTo(outer);
		SgDropLock *l = palloc(sizeof(SgDropLock));

		l->relid = DatumGetObjectId(SPI_getbinval(tup, desc, 1, &isnull));
		/* DROP TRIGGER's mode on a captured table */
		l->mode = DatumGetInt32(SPI_getbinval(tup, desc, 2, &isnull)) == 0 ?
			ShareRowExclusiveLock : AccessExclusiveLock;
		locks = lappend(locks, l);
		MemoryContextSwitchTo(spi);
	}
	SPI_finish();
	return locks;
}

/*
 * One wait's bound: half of deadlock_timeout (at least 1 ms), so that the
 * drop's waits end before the deadlock detector would run in the drop.
 */
static int
sg_wait_bound_ms(void)
{
	int			ms = Max(1, DeadlockTimeout / 2);

	return LockTimeout > 0 ? Min(ms, LockTimeout) : ms;
}

void
ExtensionDropRetrying(ProcessUtility_hook_type next, SgUtilityCall *c)
{
	MemoryContext outer = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	int			user_timeout = LockTimeout;
	TimestampTz start = GetCurrentTimestamp();
	List	   *locks = sg_drop_locks();
	char		bound[32];

	snprintf(bound, sizeof(bound), "%d", sg_wait_bound_ms());
	for (;;)
	{
		ErrorData  *edata;

		BeginInternalSubTransaction(NULL);
		MemoryContextSwitchTo(outer);
		PG_TRY();
		{
			int			nest = NewGUCNestLevel();
			ListCell   *lc;

			(void) set_config_option("lock_timeout", bound, PGC_USERSET, PGC_S_SESSION,
									 GUC_ACTION_SAVE, true, 0, false);
			foreach(lc, locks)
			{
				SgDropLock *l = lfirst(lc);

				/* (an OID dropped since the list was read: a harmless lock) */
				LockRelationOid(l->relid, l->mode);
			}
			next(c->pstmt, c->queryString, c->readOnlyTree, c->context, c->params,
				 c->queryEnv, c->dest, c->qc);
			AtEOXact_GUC(true, nest);
			ReleaseCurrentSubTransaction();
			MemoryContextSwitchTo(outer);
			CurrentResourceOwner = owner;
			return;
		}
		PG_CATCH();
		{
			MemoryContextSwitchTo(outer);
			edata = CopyErrorData();
			FlushErrorState();
			RollbackAndReleaseCurrentSubTransaction();
			MemoryContextSwitchTo(outer);
			CurrentResourceOwner = owner;
		}
		PG_END_TRY();

		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE ||
			(user_timeout > 0 &&
			 TimestampDifferenceExceeds(start, GetCurrentTimestamp(), user_timeout)))
			ReThrowError(edata);
		FreeErrorData(edata);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 SG_DROP_PAUSE_MS, sg_wait_event(SG_WE_DROP_RETRY));
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}
