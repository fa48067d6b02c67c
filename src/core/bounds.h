/*-------------------------------------------------------------------------
 *
 * bounds.h
 *		The bound of every parameter that multiplies the work or the state
 *		of a stream, a consumer or a pipeline, in one place.
 *
 * A parameter a user sets decides how much work a call, a batch or a
 * maintenance round does: windows per event, events per batch, partitions,
 * horizons that decide how long state is kept.  Each has a bound here,
 * refused when the object is created and when it is altered (22023, the
 * message naming the value and the bound), and documented in the "Bounds"
 * table of docs/security.md; test sql/17_bounds.sql tries each just over
 * and at its bound.  A bound an administrator may want to move is a
 * superuser GUC (streamguard.c); the rest are fixed here.
 *
 * Bounds stop a parameter from asking for absurd work; they do not make
 * work free.  What is left (a batch of the largest size into the most
 * windows) runs under the batch's timeout and checks for interrupts in
 * every loop (docs/security.md, "Bounded work").
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_BOUNDS_H
#define SG_BOUNDS_H

#include "datatype/timestamp.h"

/* partitions of a stream: create_stream, alter_stream */
#define SG_MAX_PARTITIONS_PER_STREAM 1024

/*
 * Segments a stream keeps: ceil(retention / segment_interval).  Each
 * segment is a table; the maintenance worker rotates and drops them.
 */
#define SG_MAX_SEGMENTS_PER_STREAM	1000
#define SG_MIN_SEGMENT_US			USECS_PER_SEC

/* dedup_window of a stream or a pipeline: 1 second to 366 days */
#define SG_MIN_DEDUP_WINDOW_US		USECS_PER_SEC
#define SG_MAX_DEDUP_WINDOW_US		(366 * USECS_PER_DAY)

/* events per batch: create_pipeline, alter_pipeline, create_window_pipeline */
#define SG_MAX_BATCH_SIZE			100000

/* workers of a pipeline */
#define SG_MAX_PIPELINE_WORKERS		64

/* skip_event requests a pipeline holds until it passes them */
#define SG_MAX_PENDING_SKIPS		1000

/* events per poll() and read(); the longest poll(wait) */
#define SG_MAX_POLL_EVENTS			100000
#define SG_MAX_POLL_WAIT_US			(3600 * USECS_PER_SEC)

/* rows per run_backfill_chunk */
#define SG_MAX_BACKFILL_ROWS		1000000

/*
 * Windows.  A hopping window puts each event into ceil(size / slide)
 * windows: at most streamguard.max_windows_per_event (a superuser GUC,
 * default SG_DEFAULT_WINDOWS_PER_EVENT, at most SG_MAX_WINDOWS_PER_EVENT).
 * A window's size and a session's gap: at most SG_MAX_WINDOW_LENGTH_US.
 * allowed_lateness, keep_closed and idle_timeout decide how long windows
 * stay open or their state stays after closing: at most
 * SG_MAX_WINDOW_HORIZON_US.
 */
#define SG_DEFAULT_WINDOWS_PER_EVENT 1000
#define SG_MAX_WINDOWS_PER_EVENT	100000
#define SG_MAX_WINDOW_LENGTH_US		(366 * USECS_PER_DAY)
#define SG_MAX_WINDOW_HORIZON_US	(31 * USECS_PER_DAY)

#endif							/* SG_BOUNDS_H */
