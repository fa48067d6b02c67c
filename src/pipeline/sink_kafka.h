/*-------------------------------------------------------------------------
 *
 * sink_kafka.h
 *		Between the files of the Kafka sink (routine.h): sink_kafka.c, the
 *		producer, its transactions and checkpoints, and
 *		sink_kafka_messages.c, the rows as messages.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_SINK_KAFKA_H
#define SG_SINK_KAFKA_H

#include "io/kafka.h"
#include "pipeline/worker.h"

/* sink_kafka_messages.c */
extern int64 KafkaSinkProduceRows(SgWorker *w, SgKafka *producer, Tuplestorestate *store, int64 n,
								  uint32 wait_event);

#endif							/* SG_SINK_KAFKA_H */
