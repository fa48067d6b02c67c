/*-------------------------------------------------------------------------
 *
 * pipeline_validate.h
 *		Checks of what create_pipeline, alter_pipeline and reset_pipeline
 *		are given (pipeline_validate.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_PIPELINE_VALIDATE_H
#define SG_PIPELINE_VALIDATE_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "utils/array.h"

#include "pipeline/pipeline.h"

extern void PipelineValidateSql(const char *sql);
extern void PipelineValidateSqlFor(const char *sql, bool kafka);
extern int	PipelineCheckKafkaSource(const char *server, const char *topic);
extern char *PipelineValidateSelect(const char *sql);
extern char *PipelineOutputColumns(const char *sql);
extern char *PipelineQuoteTable(const char *name);
extern void PipelineCheckRemoteSink(const char *server, const char *table, const char *cols, SgSinkMode mode,
									const char *conflict);
extern char *PipelineCheckSinkConflict(const char *sql, ArrayType *arr);
extern int	PipelineCheckRemoteSource(const char *server, const char *stream);
extern void PipelineCheckRemoteReset(int32 pipeline_id, Oid owner, int32 partition, int64 seq);
extern void PipelineCheckBatchSize(int32 n);
extern void PipelineCheckRetry(int32 max_attempts, Interval *backoff, Interval *max_backoff);
extern void PipelineCheckBatchTimeout(Interval *iv);
extern void PipelineCheckWorkers(int32 workers);
extern void PipelineCheckWorkersRemote(int32 workers, const char *source_server, const char *sink_server);

#endif							/* SG_PIPELINE_VALIDATE_H */
