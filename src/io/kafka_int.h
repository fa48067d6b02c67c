/*-------------------------------------------------------------------------
 *
 * kafka_int.h
 *		What the files of the Kafka client share, and only they: the
 *		handle, the report area librdkafka's threads write, a call made
 *		on a thread of its own, and the helpers between the files.
 *		Included by src/io/kafka*.c only; the API is io/kafka.h.
 *
 *		kafka.c			options, validator, report callbacks, open, close
 *		kafka_call.c	calls that may wait, on a thread; the waits; errors
 *		kafka_consume.c	consumers: metadata, offsets, assign, seek, poll
 *		kafka_produce.c	producers: transactions, produce, flush
 *
 * The lock rule of all four: report->lock and an SgKafkaCall's lock are
 * taken around a few plain reads and writes, never held across a call
 * into PostgreSQL (an ERROR would leave them taken) nor into librdkafka.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_KAFKA_INT_H
#define SG_KAFKA_INT_H

#include <pthread.h>

#include "io/kafka.h"

/* one blocking librdkafka call at most this long between interrupt checks */
#define SG_KAFKA_STEP_MS 200
/* topic handles a producer keeps (the sink's topic and its checkpoints) */
#define SG_KAFKA_MAX_TOPICS 4

/* what librdkafka's threads report: malloc'd, never palloc'd */
typedef struct SgKafkaReport
{
	pthread_mutex_t lock;
	rd_kafka_resp_err_t err;	/* last error reported (0: none) */
	char		message[256];	/* its text, one line */
	uint64		count;			/* errors reported or logged so far */
	/* a producer's delivery reports (served on the backend's thread) */
	uint64		delivered;		/* messages acknowledged */
	uint64		failed;			/* messages that could not be delivered */
	rd_kafka_resp_err_t dr_err; /* the first delivery error */
} SgKafkaReport;

typedef struct SgKafkaCall SgKafkaCall;
typedef void (*SgKafkaCallFn) (SgKafkaCall *c);

/*
 * A librdkafka call that may wait, made on a thread of its own (malloc'd,
 * see sg_kafka_call): the backend waits for it on the latch and may give
 * up on it; the client's destroy joins the thread first.  Its arguments
 * are its own (malloc'd here or by librdkafka, freed with it): nothing of
 * the backend's memory, which an error frees while the call may go on.
 */
struct SgKafkaCall
{
	rd_kafka_t *rk;
	SgKafkaCallFn fn;
	int			timeout_ms;		/* librdkafka's timeout for the call */
	int			wake_fd;		/* written when done: the handle's pipe */
	pthread_t	thread;
	pthread_mutex_t lock;
	bool		done;
	/* arguments */
	char	   *topic;
	int32		partition;
	rd_kafka_topic_partition_list_t *list;
	/* results, read once done */
	rd_kafka_resp_err_t err;
	rd_kafka_error_t *error;
	rd_kafka_resp_err_t topic_err;	/* metadata: the topic's error */
	int			partitions;		/* metadata: the topic's partition count */
	int64		lo;				/* watermarks */
	int64		hi;
};

struct SgKafka
{
	rd_kafka_t *rk;
	rd_kafka_queue_t *queue;	/* the consumer queue */
	int			pipe_fd[2];		/* [0] we wait on, [1] librdkafka writes */
	SgKafkaReport *report;
	rd_kafka_message_t *current;	/* returned by KafkaPoll, not done */
	bool		producer;
	rd_kafka_topic_t *topics[SG_KAFKA_MAX_TOPICS];	/* a producer's topics */
	int			ntopics;
	SgKafkaCall *call;			/* a call on its thread (sg_kafka_call), or NULL */
	char		server[NAMEDATALEN];
};

/* kafka.c */
extern SgKafka *sg_kafka_open(const char *server, Oid userid, rd_kafka_type_t type,
							  const char *group_id, const char *const *fixed);
extern void sg_kafka_tick(void);
extern void sg_kafka_call_free(SgKafkaCall *c);
extern void sg_kafka_call_end(SgKafkaCall *c);

/* kafka_call.c */
extern SgKafkaCall *sg_kafka_call_new(SgKafka *k, SgKafkaCallFn fn, const char *topic);
extern void sg_kafka_call(SgKafka *k, SgKafkaCall *c, const char *what, int timeout_ms,
						  TimestampTz give_up, uint32 wait_event);
extern void sg_call_metadata(SgKafkaCall *c);
extern void sg_call_watermarks(SgKafkaCall *c);
extern void sg_call_seek(SgKafkaCall *c);
extern void sg_call_assign(SgKafkaCall *c);
extern void sg_call_assign_more(SgKafkaCall *c);
extern void sg_call_init(SgKafkaCall *c);
extern void sg_call_begin(SgKafkaCall *c);
extern void sg_call_commit(SgKafkaCall *c);
extern void sg_kafka_pause(long ms);
extern int	sg_kafka_left_ms(TimestampTz deadline);
extern void sg_kafka_drain_pipe(SgKafka *k);
extern void sg_kafka_wait(SgKafka *k, TimestampTz deadline, uint32 wait_event);
extern void sg_kafka_raise_error(SgKafka *k, rd_kafka_error_t *error, const char *what);

#endif							/* SG_KAFKA_INT_H */
