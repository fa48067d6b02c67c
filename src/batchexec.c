/*-------------------------------------------------------------------------
 *
 * batchexec.c
 *		Running a pipeline's SQL as its owner: the execution context shared
 *		by the pipeline worker (every batch) and redrive_dead_letters (in
 *		the caller's transaction).
 *
 * Code that runs on behalf of another role is hostile territory for the
 * code around it, which runs as a superuser (the worker) or as whoever
 * called us.  The SQL therefore runs:
 *	- as the owner, through a local user change with
 *	  SECURITY_RESTRICTED_OPERATION (no SET ROLE, no temporary objects, no
 *	  cursors WITH HOLD), the way PostgreSQL runs index expressions during
 *	  maintenance;
 *	- in its own GUC nest level, with the search_path of the SQL's
 *	  definition; everything it sets, even without LOCAL, is rolled back
 *	  on the way out (AtEOXact_GUC(false, ...));
 *	- without commit-time code of its own: PostgreSQL refuses, inside a
 *	  security-restricted operation, to queue deferred trigger events and
 *	  to declare cursors WITH HOLD (either would run at COMMIT as whoever
 *	  commits: the worker's superuser, or redrive's caller);
 *	- under a timeout, armed here because a background worker has no
 *	  statement timeout of its own;
 *	- in a nested SPI connection that sees the events as the ephemeral
 *	  named relation "batch" (the mechanism of trigger transition tables).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/timeout.h"

#include "pipeline.h"
#include "streamguard.h"

/* the columns of relation "batch" (and of streamguard.event) */
TupleDesc
SgEventTupleDesc(void)
{
	TupleDesc	desc = CreateTemplateTupleDesc(6);

	TupleDescInitEntry(desc, 1, "partition", INT4OID, -1, 0);
	TupleDescInitEntry(desc, 2, "seq", INT8OID, -1, 0);
	TupleDescInitEntry(desc, 3, "key", TEXTOID, -1, 0);
	TupleDescInitEntry(desc, 4, "payload", JSONBOID, -1, 0);
	TupleDescInitEntry(desc, 5, "dedup_key", TEXTOID, -1, 0);
	TupleDescInitEntry(desc, 6, "appended_at", TIMESTAMPTZOID, -1, 0);
	return BlessTupleDesc(desc);
}

/*
 * Make the batch visible to the SPI connection as the relation "batch".
 */
void
PipelineRegisterBatch(Tuplestorestate *store, TupleDesc desc, int64 ntuples)
{
	EphemeralNamedRelation enr = palloc0(sizeof(EphemeralNamedRelationData));
	int			ret;

	enr->md.name = "batch";
	enr->md.reliddesc = InvalidOid;
	enr->md.tupdesc = desc;
	enr->md.enrtype = ENR_NAMED_TUPLESTORE;
	enr->md.enrtuples = (double) ntuples;
	enr->reldata = store;
	ret = SPI_register_relation(enr);
	if (ret != SPI_OK_REL_REGISTER)
		elog(ERROR, "could not register the batch relation: %s", SPI_result_code_string(ret));
}

void
BatchEnterOwner(SgOwnerContext *ctx, Oid owner, const char *search_path, int timeout_ms,
				Tuplestorestate *store, TupleDesc desc, int64 n)
{
	GetUserIdAndSecContext(&ctx->save_user, &ctx->save_sec);
	SetUserIdAndSecContext(owner, ctx->save_sec | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	ctx->nest = NewGUCNestLevel();
	ctx->timeout_ms = timeout_ms;
	if (timeout_ms > 0)
		enable_timeout_after(STATEMENT_TIMEOUT, timeout_ms);
	(void) set_config_option("search_path", search_path, PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("datestyle", "ISO", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("extra_float_digits", "3", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	tuplestore_rescan(store);
	PipelineRegisterBatch(store, desc, n);
}

/*
 * Leave the owner's context: the timeout disarmed, the SQL's settings
 * rolled back, the user id restored.
 */
void
BatchLeaveOwner(SgOwnerContext *ctx)
{
	if (ctx->timeout_ms > 0)
		disable_timeout(STATEMENT_TIMEOUT, false);
	SPI_finish();
	AtEOXact_GUC(false, ctx->nest);
	SetUserIdAndSecContext(ctx->save_user, ctx->save_sec);
}
