/*-------------------------------------------------------------------------
 *
 * batchexec.h
 *		A pipeline's SQL as its owner, over the relation "batch"
 *		(batchexec.c): what the SQL API shares with the worker.  The
 *		worker's own part is in worker.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_BATCHEXEC_H
#define SG_BATCHEXEC_H

#include "postgres.h"

#include "access/tupdesc.h"
#include "nodes/pg_list.h"
#include "utils/tuplestore.h"

typedef struct SgOwnerContext
{
	Oid			save_user;
	int			save_sec;
	int			nest;
	int			timeout_ms;
} SgOwnerContext;

extern TupleDesc SgEventTupleDesc(void);
extern void PipelineRegisterBatch(Tuplestorestate *store, TupleDesc desc, int64 ntuples);
extern List *PipelineOutputNames(const char *sql);
extern TupleDesc PipelineOutputDesc(const char *sql);
extern void BatchEnterOwner(SgOwnerContext *ctx, Oid owner, const char *search_path, int timeout_ms,
							Tuplestorestate *store, TupleDesc desc, int64 n);
extern void BatchLeaveOwner(SgOwnerContext *ctx);

#endif							/* SG_BATCHEXEC_H */
