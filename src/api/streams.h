/*-------------------------------------------------------------------------
 *
 * streams.h
 *		The stream SQL API (streams.c): the quotas it enforces.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_STREAMS_H
#define SG_STREAMS_H

#include "postgres.h"

#include "fmgr.h"

/* GUCs (registered by streamguard.c) */
extern int	sg_role_max_streams;
extern int	sg_role_max_partitions;
extern int	sg_database_max_streams;
extern int	sg_database_max_partitions;

/* a SQL function other files call directly (ownership.c) */
extern Datum sg_drop_stream(PG_FUNCTION_ARGS);

#endif							/* SG_STREAMS_H */
