/*-------------------------------------------------------------------------
 *
 * seek.h
 *		Moving a consumer's positions (seek.c), for reset_pipeline.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_SEEK_H
#define SG_SEEK_H

#include "postgres.h"

#include "datatype/timestamp.h"

#include "catalog/sg_catalog.h"

extern void ConsumerSeekSeq(SgStreamMeta *meta, const char *consumer, int partition, int64 seq);
extern void ConsumerSeekTime(SgStreamMeta *meta, const char *consumer, TimestampTz from);

#endif							/* SG_SEEK_H */
