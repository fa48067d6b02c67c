/*-------------------------------------------------------------------------
 *
 * worker_units.h
 *		Background worker slots as a server resource (worker_units.c): the
 *		units streamguard's dynamic workers claim, capped per database and
 *		per role, under a reserve it never touches.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_WORKER_UNITS_H
#define SG_WORKER_UNITS_H

#include "postgres.h"

typedef enum SgUnitKind
{
	SG_UNIT_PIPELINE,
	SG_UNIT_BACKFILL
} SgUnitKind;

/* GUCs (registered by streamguard.c) */
extern int	sg_reserved_worker_processes;
extern int	sg_database_max_workers;
extern int	sg_role_max_workers;

extern Size WorkerUnitsShmemSize(void);
extern void WorkerUnitsShmemRequest(void);
extern void WorkerUnitsShmemInit(void);
extern int	WorkerUnitsReserve(void);
extern int	WorkerUnitsBudget(void);
extern int	WorkerUnitsDatabaseCap(void);
extern int	WorkerUnitsRoleCap(void);
extern void WorkerUnitsCheckCouldRun(Oid owner, int32 workers);
extern bool WorkerUnitClaim(SgUnitKind kind, Oid roleid, int32 object_id, int32 worker,
							char *why, size_t whylen);
extern void WorkerUnitRelease(SgUnitKind kind, int32 object_id, int32 worker);

#endif							/* SG_WORKER_UNITS_H */
