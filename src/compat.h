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
#include "utils/wait_event.h"

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

/*
 * A wait event of ours, for pg_stat_activity.  PostgreSQL 17 lets an
 * extension register named ones.  Before that there is only the class
 * PG_WAIT_EXTENSION: any value in it shows as wait_event_type 'Extension'
 * and wait_event 'Extension', so the distinct numbers (n > 0) only tell our
 * waits apart in a debugger or a core file.  On 17 and later an
 * unregistered number in that class would make pg_stat_activity fail, hence
 * the registration there.
 */
#if PG_VERSION_NUM >= 170000
#define SG_WAIT_EVENT(name, n)	WaitEventExtensionNew(name)
#else
#define SG_WAIT_EVENT(name, n)	(PG_WAIT_EXTENSION | (uint32) (n))
#endif

#endif							/* SG_COMPAT_H */
