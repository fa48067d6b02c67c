/*-------------------------------------------------------------------------
 *
 * twophase.h
 *		The names a pipeline leaves on its sink and in-doubt resolution
 *		(twophase.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_TWOPHASE_H
#define SG_TWOPHASE_H

#include "postgres.h"

#include "io/remote.h"

extern char *PipelineGidPrefix(int32 pipeline_id);
extern char *PipelineGid(int32 pipeline_id, int32 worker, int64 epoch, int64 attempt);
extern char *PipelineSinkKey(int32 pipeline_id);
extern char *PipelineWorkerKey(int32 pipeline_id, int32 worker);
extern void PipelineSinkMarker(SgRemote *r, int32 pipeline_id, int32 worker, const char *gid);
extern char *PipelineResolveInDoubt(SgRemote *r, int32 pipeline_id, const char *name,
									int32 resolver, int32 nworkers);

#endif							/* SG_TWOPHASE_H */
