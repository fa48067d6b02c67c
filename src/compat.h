/*-------------------------------------------------------------------------
 *
 * compat.h
 *		Version shims: the one place where PostgreSQL major-version
 *		differences are papered over.
 *
 * streamguard targets PostgreSQL 15.  Anything that is spelled differently
 * in later majors gets a macro here, so that the rest of the code reads
 * the same everywhere.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_COMPAT_H
#define SG_COMPAT_H

#include "access/twophase.h"
#include "storage/proc.h"

#if PG_VERSION_NUM < 150000
#error "streamguard requires PostgreSQL 15 or later"
#endif

/* index of this backend's PGPROC; renamed MyProcNumber in 17 */
#if PG_VERSION_NUM >= 170000
#define SG_MY_PROC_INDEX	MyProcNumber
#else
#define SG_MY_PROC_INDEX	(MyProc->pgprocno)
#endif

/* total PGPROC slots (backends, auxiliary processes, prepared xacts) */
#define SG_TOTAL_PROCS		(MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts)

#endif							/* SG_COMPAT_H */
