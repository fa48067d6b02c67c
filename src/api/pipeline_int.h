/*-------------------------------------------------------------------------
 *
 * pipeline_int.h
 *		What the files of the pipeline lifecycle SQL API share, and only
 *		they: the reading and checking of create_pipeline's and
 *		alter_pipeline's arguments (pipeline_args.c), which the entry
 *		points of api/pipeline.c call.  The API for the other files is
 *		api/pipeline.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_API_PIPELINE_INT_H
#define SG_API_PIPELINE_INT_H

#include "postgres.h"

#include "fmgr.h"

#include "catalog/pipeline_catalog.h"
#include "catalog/sg_catalog.h"

extern void PipelineCreateArgs(FunctionCallInfo fcinfo, bool signature_0_1, SgPipelineSpec *spec);
extern void PipelineCheckEnds(SgPipelineSpec *spec, bool *kafka_source, bool *kafka_sink);
extern void PipelineCheckAccess(const SgPipelineSpec *spec, bool kafka_source, bool kafka_sink,
								SgStreamMeta **meta, int *remote_nparts);
extern void PipelineAlterArgs(FunctionCallInfo fcinfo, bool signature_0_1, SgPipelineChange *change);
extern void PipelineCheckNewSql(const char *name, const char *sql);

#endif							/* SG_API_PIPELINE_INT_H */
