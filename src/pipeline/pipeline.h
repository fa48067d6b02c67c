/*-------------------------------------------------------------------------
 *
 * pipeline.h
 *		What a pipeline is, for the SQL API and the worker alike: the
 *		closed vocabularies of its definition (their words are defined in
 *		workerstate.c), a worker's start argument, and the worker's entry
 *		point (worker.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_PIPELINE_H
#define SG_PIPELINE_H

#include "postgres.h"

#include "core/util.h"

typedef enum SgGuarantee
{
	SG_EXACTLY_ONCE,
	SG_AT_LEAST_ONCE,
	SG_AT_MOST_ONCE
} SgGuarantee;

typedef enum SgErrorPolicy
{
	SG_POLICY_STOP,
	SG_POLICY_SKIP,
	SG_POLICY_DEAD_LETTER
} SgErrorPolicy;

typedef enum SgSinkMode
{
	SG_SINK_TWO_PHASE,
	SG_SINK_OFFSETS
} SgSinkMode;

typedef enum SgStartFrom
{
	SG_START_BEGINNING,
	SG_START_END
} SgStartFrom;

/* the words of each, in enum order (workerstate.c) */
extern const SgWordList SgGuaranteeWords;
extern const SgWordList SgErrorPolicyWords;
extern const SgWordList SgSinkModeWords;
extern const SgWordList SgStartFromWords;

/* a pipeline worker's bgw_main_arg: the pipeline and which of its workers */
#define SgWorkerArg(pipeline_id, worker) \
	UInt64GetDatum((uint64) (uint32) (pipeline_id) | ((uint64) (uint32) (worker) << 32))
#define SgWorkerArgPipeline(arg)	((int32) (DatumGetUInt64(arg) & 0xFFFFFFFF))
#define SgWorkerArgWorker(arg)		((int32) (DatumGetUInt64(arg) >> 32))

/* worker.c */
extern PGDLLEXPORT void PipelineWorkerMain(Datum arg);

#endif							/* SG_PIPELINE_H */
