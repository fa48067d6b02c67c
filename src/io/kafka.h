/*-------------------------------------------------------------------------
 *
 * kafka.h
 *		Kafka clients through librdkafka (kafka.c): the streamguard_kafka
 *		foreign-data wrapper's validator, consumers and producers built from
 *		a foreign server and a user mapping, interruptible and time-bounded
 *		waits.
 *
 * Callers hold an SgKafka, a handle allocated in TopMemoryContext.  What
 * librdkafka's own threads report (logs, errors) lands in a malloc'd area
 * of the handle under a mutex; nothing of PostgreSQL is touched from those
 * threads.  librdkafka types appear here only for the message a consumer
 * returns: its callers copy the message into palloc'd memory and hand it
 * back with KafkaMessageDone.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_KAFKA_H
#define SG_KAFKA_H

#include "postgres.h"

#include "access/tupdesc.h"
#include "datatype/timestamp.h"

#include "core/compat.h"

#include <librdkafka/rdkafka.h>

typedef struct SgKafka SgKafka;

/* a partition's assignment: the next offset to read (or -2 beginning, -1 end) */
typedef struct SgKafkaStart
{
	int32		partition;
	int64		offset;
} SgKafkaStart;

extern TupleDesc KafkaEventTupleDesc(void);
extern bool KafkaIsKafkaServer(const char *server);
extern void KafkaCheckTopicName(const char *topic);
extern SgKafka *KafkaConsumerOpen(const char *server, Oid userid, const char *group_id);
extern void KafkaClose(SgKafka *k);
extern const char *KafkaServerName(SgKafka *k);
extern void KafkaLastError(SgKafka *k, char *buf, size_t len);
extern uint64 KafkaErrorCount(SgKafka *k);
extern int	KafkaTopicPartitions(SgKafka *k, const char *topic, TimestampTz deadline);
extern int64 KafkaPartitionEnd(SgKafka *k, const char *topic, int32 partition, TimestampTz deadline, int64 *start);
extern void KafkaPositions(SgKafka *k, const char *topic, int n, int64 *out);
extern void KafkaCommitGroupOffsets(SgKafka *k, const char *topic, int n, const int64 *offsets);
extern void KafkaAssign(SgKafka *k, const char *topic, SgKafkaStart *starts, int n);
extern void KafkaAssignMore(SgKafka *k, const char *topic, SgKafkaStart *starts, int n);
extern void KafkaSeek(SgKafka *k, const char *topic, SgKafkaStart *starts, int n, TimestampTz deadline);
extern rd_kafka_message_t *KafkaPoll(SgKafka *k, long timeout_ms, uint32 wait_event);
extern void KafkaMessageDone(SgKafka *k);
extern bool KafkaWatermark(SgKafka *k, const char *topic, int32 partition, int64 *high);
pg_noreturn extern void KafkaRaise(SgKafka *k, rd_kafka_resp_err_t err, const char *what);
extern TimestampTz KafkaDeadline(void);

/* sink_kafka*.c: checks of create_pipeline and alter_pipeline */
extern void KafkaSinkCheckShape(const char *sql);
extern void KafkaSinkCheck(const char *server, const char *topic, bool exactly_once);

/* producers (the Kafka sink) */
extern SgKafka *KafkaProducerOpen(const char *server, Oid userid, const char *transactional_id);
extern void KafkaTxnInit(SgKafka *k, TimestampTz deadline);
extern void KafkaTxnBegin(SgKafka *k);
extern void KafkaTxnCommit(SgKafka *k, TimestampTz deadline);
extern void KafkaDeliveryReset(SgKafka *k);
extern void KafkaProduce(SgKafka *k, const char *topic, int32 partition, const char *key, size_t key_len,
						 const char *value, size_t value_len, rd_kafka_headers_t *headers, uint32 wait_event);
extern uint64 KafkaFlush(SgKafka *k, uint32 wait_event);

#endif							/* SG_KAFKA_H */
