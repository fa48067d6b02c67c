/*-------------------------------------------------------------------------
 *
 * kafka_produce.c
 *		Kafka producers (the Kafka sink): open one, its transactions
 *		(init, begin, commit: every message of one, or none), its topic
 *		handles, producing a message and flushing what is queued.
 *
 * A producer's main queue (delivery reports, logs, errors) is served by
 * rd_kafka_poll(0) on the backend's thread; a full queue and a flush are
 * waited out on the latch and the queue's pipe (sg_kafka_wait), and the
 * transactional calls go through sg_kafka_call (kafka_call.c).  We never
 * abort a transaction: a producer that failed is closed.  report->lock is
 * taken only to read the delivery counters, never across a PostgreSQL
 * call.
 *
 * Exported (io/kafka.h): KafkaProducerOpen, KafkaTxnInit, KafkaTxnBegin,
 * KafkaTxnCommit, KafkaDeliveryReset, KafkaProduce, KafkaFlush.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "io/kafka_int.h"
#include "io/remote.h"

/* ------------------------------------------------------------ producers */

/*
 * A producer for `server` as `userid`: idempotent always (no duplicates
 * or reordering from its own retries), transactional with
 * `transactional_id` when not NULL.  Messages not acknowledged within
 * streamguard.remote_timeout fail (a delivery error, or an abortable
 * transaction error).
 */
SgKafka *
KafkaProducerOpen(const char *server, Oid userid, const char *transactional_id)
{
	const char *fixed[16];
	int			n = 0;
	int			msg_timeout = Max(sg_remote_timeout_ms, 1000);

	fixed[n++] = "enable.idempotence";
	fixed[n++] = "true";
	fixed[n++] = "acks";
	fixed[n++] = "all";
	/* a batch is produced at once and then waited for: no lingering */
	fixed[n++] = "linger.ms";
	fixed[n++] = "0";
	fixed[n++] = "message.timeout.ms";
	fixed[n++] = psprintf("%d", msg_timeout);
	if (transactional_id)
	{
		fixed[n++] = "transactional.id";
		fixed[n++] = transactional_id;
		fixed[n++] = "transaction.timeout.ms";
		fixed[n++] = psprintf("%d", Max(msg_timeout, 60000));
	}
	fixed[n] = NULL;
	return sg_kafka_open(server, userid, RD_KAFKA_PRODUCER, NULL, fixed);
}

/* serve the producer's main queue: delivery reports, logs, errors */
static void
sg_kafka_serve(SgKafka *k)
{
	sg_kafka_drain_pipe(k);
	(void) rd_kafka_poll(k->rk, 0);
}

/*
 * A transactional call (on its thread: sg_kafka_call), made again while it
 * fails with an error that says so (retriable, a timeout) until
 * `deadline`; any other error raised with its code.
 */
static void
sg_kafka_txn_call(SgKafka *k, SgKafkaCallFn fn, const char *what, TimestampTz deadline)
{
	TimestampTz give_up = TimestampTzPlusMilliseconds(deadline, 1000);

	for (;;)
	{
		SgKafkaCall *c;
		rd_kafka_error_t *error;

		sg_kafka_tick();
		c = sg_kafka_call_new(k, fn, NULL);
		sg_kafka_call(k, c, what, sg_kafka_left_ms(deadline), give_up, PG_WAIT_EXTENSION);
		error = c->error;
		c->error = NULL;
		sg_kafka_call_free(c);
		if (error == NULL)
			return;
		if ((rd_kafka_error_is_retriable(error) || rd_kafka_error_code(error) == RD_KAFKA_RESP_ERR__TIMED_OUT) &&
			!rd_kafka_error_is_fatal(error) && !rd_kafka_error_txn_requires_abort(error) &&
			GetCurrentTimestamp() < deadline)
		{
			rd_kafka_error_destroy(error);
			sg_kafka_pause(50);
			continue;
		}
		sg_kafka_raise_error(k, error, what);
	}
}

/*
 * init_transactions: the producer gets its id and a new epoch from the
 * transaction coordinator, which aborts what an earlier producer with the
 * same transactional.id left open and fences that producer
 * (PRODUCER_FENCED) from now on.
 */
void
KafkaTxnInit(SgKafka *k, TimestampTz deadline)
{
	sg_kafka_txn_call(k, sg_call_init, "initializing the transactional producer", deadline);
}

void
KafkaTxnBegin(SgKafka *k)
{
	SgKafkaCall *c = sg_kafka_call_new(k, sg_call_begin, NULL);
	rd_kafka_error_t *error;

	sg_kafka_call(k, c, "beginning a transaction", sg_remote_timeout_ms,
				  TimestampTzPlusMilliseconds(KafkaDeadline(), 1000), PG_WAIT_EXTENSION);
	error = c->error;
	c->error = NULL;
	sg_kafka_call_free(c);
	if (error)
		sg_kafka_raise_error(k, error, "beginning a transaction");
	KafkaDeliveryReset(k);
}

/* flush and commit the transaction: every message of it, or none */
void
KafkaTxnCommit(SgKafka *k, TimestampTz deadline)
{
	sg_kafka_txn_call(k, sg_call_commit, "committing the transaction", deadline);
}

/* forget the delivery reports counted so far */
void
KafkaDeliveryReset(SgKafka *k)
{
	pthread_mutex_lock(&k->report->lock);
	k->report->delivered = k->report->failed = 0;
	k->report->dr_err = RD_KAFKA_RESP_ERR_NO_ERROR;
	pthread_mutex_unlock(&k->report->lock);
}

static rd_kafka_topic_t *
sg_kafka_topic(SgKafka *k, const char *topic)
{
	int			i;
	rd_kafka_topic_t *rkt;

	for (i = 0; i < k->ntopics; i++)
		if (strcmp(rd_kafka_topic_name(k->topics[i]), topic) == 0)
			return k->topics[i];
	if (k->ntopics == SG_KAFKA_MAX_TOPICS)
		elog(ERROR, "too many Kafka topics for one producer");
	rkt = rd_kafka_topic_new(k->rk, topic, NULL);
	if (rkt == NULL)
		KafkaRaise(k, rd_kafka_last_error(), psprintf("topic \"%s\"", topic));
	k->topics[k->ntopics++] = rkt;
	return rkt;
}

/*
 * Queue one message (copied): partition -1 lets the partitioner choose
 * from the key.  `headers` (or NULL) belong to the message from here on.
 * A full queue is waited out (delivery reports served meanwhile), up to
 * streamguard.remote_timeout.
 */
void
KafkaProduce(SgKafka *k, const char *topic, int32 partition, const char *key, size_t key_len,
			 const char *value, size_t value_len, rd_kafka_headers_t *headers, uint32 wait_event)
{
	rd_kafka_topic_t *rkt;
	TimestampTz deadline = 0;

	PG_TRY();
	{
		rkt = sg_kafka_topic(k, topic);
	}
	PG_CATCH();
	{
		if (headers)
			rd_kafka_headers_destroy(headers);
		PG_RE_THROW();
	}
	PG_END_TRY();
	for (;;)
	{
		rd_kafka_resp_err_t err;

		err = rd_kafka_producev(k->rk,
								RD_KAFKA_V_RKT(rkt),
								RD_KAFKA_V_PARTITION(partition < 0 ? RD_KAFKA_PARTITION_UA : partition),
								RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
								RD_KAFKA_V_KEY(key, key ? key_len : 0),
								RD_KAFKA_V_VALUE((void *) value, value ? value_len : 0),
								RD_KAFKA_V_HEADERS(headers),
								RD_KAFKA_V_END);
		if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
			return;
		if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL)
		{
			if (headers)
				rd_kafka_headers_destroy(headers);
			KafkaRaise(k, err, psprintf("producing to partition %d of topic \"%s\"", (int) partition, topic));
		}
		if (deadline == 0)
			deadline = KafkaDeadline();
		if (GetCurrentTimestamp() >= deadline)
		{
			if (headers)
				rd_kafka_headers_destroy(headers);
			KafkaRaise(k, err, psprintf("producing to topic \"%s\": the queue stayed full for streamguard.remote_timeout (%d ms)",
										topic, sg_remote_timeout_ms));
		}
		sg_kafka_serve(k);
		PG_TRY();
		{
			sg_kafka_wait(k, deadline, wait_event);
		}
		PG_CATCH();
		{
			if (headers)
				rd_kafka_headers_destroy(headers);
			PG_RE_THROW();
		}
		PG_END_TRY();
	}
}

/*
 * Wait until every message queued is acknowledged or failed (bounded:
 * message.timeout.ms is streamguard.remote_timeout); raise the first
 * delivery error since KafkaDeliveryReset.  Returns the messages
 * acknowledged since then.
 */
uint64
KafkaFlush(SgKafka *k, uint32 wait_event)
{
	/*
	 * message.timeout.ms, plus time for the last reports to be served
	 * (librdkafka looks for messages timed out once a second)
	 */
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													   (int64) Max(sg_remote_timeout_ms, 1000) + 2000);
	uint64		failed,
				delivered;
	rd_kafka_resp_err_t err;

	for (;;)
	{
		sg_kafka_tick();
		sg_kafka_serve(k);
		if (rd_kafka_outq_len(k->rk) == 0)
			break;
		if (GetCurrentTimestamp() >= deadline)
			KafkaRaise(k, RD_KAFKA_RESP_ERR__TIMED_OUT, "waiting for the acknowledgements of the batch's messages");
		sg_kafka_wait(k, deadline, wait_event);
	}
	pthread_mutex_lock(&k->report->lock);
	failed = k->report->failed;
	delivered = k->report->delivered;
	err = k->report->dr_err;
	pthread_mutex_unlock(&k->report->lock);
	if (failed > 0)
		KafkaRaise(k, err, psprintf("%llu of the batch's messages could not be delivered",
									(unsigned long long) failed));
	return delivered;
}
