/*-------------------------------------------------------------------------
 *
 * compat.c
 *		Version shims that need a function rather than a macro (compat.h).
 *
 * Named wait events: from PostgreSQL 17 on, an extension registers its
 * own names (WaitEventExtensionNew) and pg_stat_activity shows them as
 * wait_event, with wait_event_type 'Extension'.  Before 17 there is only
 * the class PG_WAIT_EXTENSION, shown as 'Extension' / 'Extension'.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "core/compat.h"

static const char *const sg_wait_event_names[SG_WE_COUNT] = {
	[SG_WE_PIPELINE_IDLE] = "StreamguardPipelineIdle",
	[SG_WE_PIPELINE_RETRY] = "StreamguardPipelineRetry",
	[SG_WE_FAULT] = "StreamguardInjectedFault",
	[SG_WE_MAINTENANCE] = "StreamguardMaintenance",
	[SG_WE_LAUNCHER] = "StreamguardLauncher",
	[SG_WE_POLL] = "StreamguardPollWait",
	[SG_WE_BACKFILL] = "StreamguardBackfillThrottle",
	[SG_WE_DROP_RETRY] = "StreamguardDropRetry",
};

/*
 * The wait event to pass to WaitLatch and friends for one of our waits.
 * On 17 and later the name is registered on first use in this backend
 * (the registry is shared; the same name gets the same number everywhere).
 */
uint32
sg_wait_event(SgWaitEvent which)
{
#if PG_VERSION_NUM >= 170000
	static uint32 ids[SG_WE_COUNT];

	Assert(which >= 0 && which < SG_WE_COUNT);
	if (ids[which] == 0)
		ids[which] = WaitEventExtensionNew(sg_wait_event_names[which]);
	return ids[which];
#else
	Assert(which >= 0 && which < SG_WE_COUNT);
	(void) sg_wait_event_names;
	return PG_WAIT_EXTENSION;
#endif
}
