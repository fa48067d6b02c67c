/*-------------------------------------------------------------------------
 *
 * source_kafka.h
 *		Between the files of the Kafka source (routine.h): source_kafka.c,
 *		the consumer and the positions, and source_kafka_messages.c, the
 *		messages as rows.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_SOURCE_KAFKA_H
#define SG_SOURCE_KAFKA_H

#include "io/kafka.h"
#include "pipeline/worker.h"

/* source_kafka_messages.c */
extern int	KafkaSourcePutMessage(SgWorker *w, rd_kafka_message_t *m, Tuplestorestate *store);

#endif							/* SG_SOURCE_KAFKA_H */
