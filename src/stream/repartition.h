/*-------------------------------------------------------------------------
 *
 * repartition.h
 *		More partitions online (repartition.c): alter_stream's growth and
 *		the caps that hold readers back across it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_REPARTITION_H
#define SG_REPARTITION_H

#include "catalog/sg_catalog.h"

extern void RepartitionCaps(const SgStreamMeta *meta, const int64 *pos, int64 *cap);
extern void RepartitionGrow(const char *name, int32 stream_id, int old_n, int new_n);

#endif							/* SG_REPARTITION_H */
