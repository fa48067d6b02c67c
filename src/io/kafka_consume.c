/*-------------------------------------------------------------------------
 *
 * kafka_consume.c
 *		What a Kafka consumer does once open (KafkaConsumerOpen, kafka.c):
 *		a topic's partitions and watermarks, the positions it has reached
 *		and the group offsets it commits, assigning partitions and moving
 *		to offsets, and the poll of its queue.
 *
 * The calls that may wait (metadata, watermarks, assign, seek) go through
 * sg_kafka_call (kafka_call.c); the others here do not wait.  KafkaPoll
 * waits on the queue's pipe and the latch, never inside librdkafka, and
 * keeps the message it returns until KafkaMessageDone, the next poll or
 * KafkaClose.  No lock is held here across a PostgreSQL call.
 *
 * Exported (io/kafka.h): KafkaTopicPartitions, KafkaPartitionEnd,
 * KafkaPositions, KafkaCommitGroupOffsets, KafkaWatermark, KafkaAssign,
 * KafkaAssignMore, KafkaSeek, KafkaPoll, KafkaMessageDone.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/timestamp.h"

#include "io/kafka_int.h"
#include "io/remote.h"

/*
 * The number of partitions of `topic`, from a metadata request; raises an
 * error when the topic does not exist or no broker answered before
 * `deadline`.  Each request waits up to SG_KAFKA_STEP_MS, so that another
 * broker may answer the next one.
 */
int
KafkaTopicPartitions(SgKafka *k, const char *topic, TimestampTz deadline)
{
	TimestampTz give_up = TimestampTzPlusMilliseconds(deadline, 1000);
	char	   *what = psprintf("metadata for topic \"%s\"", topic);

	for (;;)
	{
		SgKafkaCall *c;
		rd_kafka_resp_err_t err;
		rd_kafka_resp_err_t terr;
		int			n;

		sg_kafka_tick();
		c = sg_kafka_call_new(k, sg_call_metadata, topic);
		sg_kafka_call(k, c, what,
					  Min(SG_KAFKA_STEP_MS, sg_kafka_left_ms(deadline)), give_up, PG_WAIT_EXTENSION);
		err = c->err;
		terr = c->topic_err;
		n = c->partitions;
		sg_kafka_call_free(c);
		if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
		{
			if (n > 0)
				return n;
			/* a leader election in progress is retried; the rest is final */
			if (terr != RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE && terr != RD_KAFKA_RESP_ERR_NO_ERROR)
				KafkaRaise(k, terr, psprintf("topic \"%s\"", topic));
		}
		if (GetCurrentTimestamp() >= deadline)
		{
			char		last[256];

			KafkaLastError(k, last, sizeof(last));
			KafkaRaise(k, err ? err : RD_KAFKA_RESP_ERR__TIMED_OUT,
					   psprintf("no metadata for topic \"%s\" within streamguard.remote_timeout (%d ms)%s%s",
								topic, sg_remote_timeout_ms, last[0] ? " (client: " : "", last[0] ? psprintf("%s)", last) : ""));
		}
		/* an answer that came at once (an error) is not asked again at once */
		if (err != RD_KAFKA_RESP_ERR__TIMED_OUT)
			sg_kafka_pause(50);
	}
}

/*
 * The end of a partition for a read_committed reader (its last stable
 * offset), asked of the broker, within `deadline`; its start in *start
 * when not NULL.  rd_kafka_query_watermark_offsets does not keep to its
 * timeout (it waits for the broker's answer up to socket.timeout.ms, and
 * retries): only sg_kafka_call bounds it.
 */
int64
KafkaPartitionEnd(SgKafka *k, const char *topic, int32 partition, TimestampTz deadline, int64 *start)
{
	TimestampTz give_up = TimestampTzPlusMilliseconds(deadline, 1000);
	char	   *what = psprintf("end of partition %d of topic \"%s\"", partition, topic);

	for (;;)
	{
		SgKafkaCall *c;
		rd_kafka_resp_err_t err;
		int64		lo,
					hi;

		sg_kafka_tick();
		c = sg_kafka_call_new(k, sg_call_watermarks, topic);
		c->partition = partition;
		sg_kafka_call(k, c, what,
					  sg_kafka_left_ms(deadline), give_up, PG_WAIT_EXTENSION);
		err = c->err;
		lo = c->lo;
		hi = c->hi;
		sg_kafka_call_free(c);
		if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
		{
			if (start)
				*start = lo;
			return hi;
		}
		if (err != RD_KAFKA_RESP_ERR__TIMED_OUT && err != RD_KAFKA_RESP_ERR__TRANSPORT &&
			err != RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE && err != RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION)
			KafkaRaise(k, err, what);
		if (GetCurrentTimestamp() >= deadline)
			KafkaRaise(k, err, psprintf("no end offset for partition %d of topic \"%s\" within streamguard.remote_timeout (%d ms)",
										partition, topic, sg_remote_timeout_ms));
		sg_kafka_pause(50);
	}
}

/*
 * Where the consumer stands in each partition 0 .. n-1 (the offset after
 * the last message it returned, past transaction markers and aborted
 * messages a read_committed reader never sees), or -1 when unknown.
 */
void
KafkaPositions(SgKafka *k, const char *topic, int n, int64 *out)
{
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(n);
	int			i;

	for (i = 0; i < n; i++)
	{
		rd_kafka_topic_partition_list_add(list, topic, i);
		out[i] = -1;
	}
	if (rd_kafka_position(k->rk, list) == RD_KAFKA_RESP_ERR_NO_ERROR)
		for (i = 0; i < list->cnt; i++)
			if (list->elems[i].err == RD_KAFKA_RESP_ERR_NO_ERROR && list->elems[i].offset >= 0 &&
				list->elems[i].partition >= 0 && list->elems[i].partition < n)
				out[list->elems[i].partition] = list->elems[i].offset;
	rd_kafka_topic_partition_list_destroy(list);
}

/*
 * Commit `offsets` (partitions 0 .. n-1; negative: skipped) as the
 * consumer group's offsets, asynchronously, result ignored: a courtesy for
 * Kafka-side monitoring, never read back.
 */
void
KafkaCommitGroupOffsets(SgKafka *k, const char *topic, int n, const int64 *offsets)
{
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(n);
	int			i;

	for (i = 0; i < n; i++)
		if (offsets[i] >= 0)
			rd_kafka_topic_partition_list_add(list, topic, i)->offset = offsets[i];
	if (list->cnt > 0)
		(void) rd_kafka_commit(k->rk, list, 1);
	rd_kafka_topic_partition_list_destroy(list);
}

/* the partition's high watermark as last seen in a fetch (no request) */
bool
KafkaWatermark(SgKafka *k, const char *topic, int32 partition, int64 *high)
{
	int64_t		lo,
				hi;

	if (rd_kafka_get_watermark_offsets(k->rk, topic, partition, &lo, &hi) != RD_KAFKA_RESP_ERR_NO_ERROR ||
		hi < 0)
		return false;
	*high = (int64) hi;
	return true;
}

/* a partition list of `topic` holding these partitions at these offsets */
static rd_kafka_topic_partition_list_t *
sg_start_list(const char *topic, const SgKafkaStart *starts, int n)
{
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(Max(n, 1));
	int			i;

	for (i = 0; i < n; i++)
		rd_kafka_topic_partition_list_add(list, topic, starts[i].partition)->offset = starts[i].offset;
	return list;
}

/*
 * Assign exactly these partitions at these offsets: what was fetched
 * ahead for an earlier assignment is dropped by librdkafka.
 */
void
KafkaAssign(SgKafka *k, const char *topic, SgKafkaStart *starts, int n)
{
	SgKafkaCall *c;
	rd_kafka_resp_err_t err;

	KafkaMessageDone(k);
	c = sg_kafka_call_new(k, sg_call_assign, NULL);
	c->list = sg_start_list(topic, starts, n);
	sg_kafka_call(k, c, psprintf("assigning the partitions of topic \"%s\"", topic), sg_remote_timeout_ms,
				  TimestampTzPlusMilliseconds(KafkaDeadline(), 1000), PG_WAIT_EXTENSION);
	err = c->err;
	sg_kafka_call_free(c);
	if (err)
		KafkaRaise(k, err, psprintf("assigning the partitions of topic \"%s\"", topic));
}

/*
 * Add these partitions, at these offsets, to the consumer's assignment,
 * leaving the partitions it holds as they are (partitions added to the
 * topic; see KafkaSeek for why the whole list is never assigned again).
 */
void
KafkaAssignMore(SgKafka *k, const char *topic, SgKafkaStart *starts, int n)
{
	SgKafkaCall *c;
	rd_kafka_error_t *error;

	KafkaMessageDone(k);
	c = sg_kafka_call_new(k, sg_call_assign_more, NULL);
	c->list = sg_start_list(topic, starts, n);
	sg_kafka_call(k, c, psprintf("adding partitions of topic \"%s\" to the assignment", topic), sg_remote_timeout_ms,
				  TimestampTzPlusMilliseconds(KafkaDeadline(), 1000), PG_WAIT_EXTENSION);
	error = c->error;
	c->error = NULL;
	sg_kafka_call_free(c);
	if (error)
		sg_kafka_raise_error(k, error, psprintf("adding partitions of topic \"%s\" to the assignment", topic));
}

/*
 * Move partitions that stay assigned to these offsets: a seek, never a new
 * assignment.  librdkafka 2.0.2 aborts the process on an assertion
 * (rd_kafka_assignment_partition_stopped: rktp->rktp_started) when a
 * partition is assigned again while its previous assignment is still being
 * stopped, which a consumer holding its partitions risked whenever it was
 * given the whole list again (stored positions that differ from its own,
 * partitions added to the topic).  Each seek
 * waits up to SG_KAFKA_STEP_MS for the fetcher to take the new offset
 * (after which nothing fetched for the old one is passed to us); one that
 * did not finish in that time is made again, up to `deadline`, with the
 * interrupts checked in between.
 */
void
KafkaSeek(SgKafka *k, const char *topic, SgKafkaStart *starts, int n, TimestampTz deadline)
{
	int			i;

	KafkaMessageDone(k);
	for (i = 0; i < n; i++)
	{
		char	   *what = psprintf("moving to offset %lld of partition %d of topic \"%s\"",
									(long long) starts[i].offset, (int) starts[i].partition, topic);

		for (;;)
		{
			SgKafkaCall *c;
			rd_kafka_resp_err_t err;

			sg_kafka_tick();
			c = sg_kafka_call_new(k, sg_call_seek, NULL);
			c->list = sg_start_list(topic, &starts[i], 1);
			sg_kafka_call(k, c, what,
						  Min(SG_KAFKA_STEP_MS, sg_kafka_left_ms(deadline)),
						  TimestampTzPlusMilliseconds(deadline, 1000), PG_WAIT_EXTENSION);
			err = c->err;
			sg_kafka_call_free(c);
			if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
				break;
			if (err != RD_KAFKA_RESP_ERR__TIMED_OUT)
				KafkaRaise(k, err, what);
			if (GetCurrentTimestamp() >= deadline)
				KafkaRaise(k, err, psprintf("moving to offset %lld of partition %d of topic \"%s\" within streamguard.remote_timeout (%d ms)",
											(long long) starts[i].offset, (int) starts[i].partition, topic,
											sg_remote_timeout_ms));
		}
	}
}

/*
 * The next message or consumer error, waiting at most `timeout_ms` (0: do
 * not wait) on the queue's pipe and our latch; NULL when none came.  The
 * message stays the handle's until KafkaMessageDone or the next call.
 */
rd_kafka_message_t *
KafkaPoll(SgKafka *k, long timeout_ms, uint32 wait_event)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);

	KafkaMessageDone(k);
	for (;;)
	{
		rd_kafka_message_t *m;
		long		left;
		int			rc;

		sg_kafka_drain_pipe(k);
		m = rd_kafka_consumer_poll(k->rk, 0);
		if (m != NULL)
		{
			k->current = m;
			return m;
		}
		left = (long) ((deadline - GetCurrentTimestamp()) / 1000);
		if (left <= 0)
			return NULL;
		rc = WaitLatchOrSocket(MyLatch, WL_LATCH_SET | WL_SOCKET_READABLE | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							   k->pipe_fd[0], left, wait_event);
		if (rc & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
}

void
KafkaMessageDone(SgKafka *k)
{
	if (k->current)
		rd_kafka_message_destroy(k->current);
	k->current = NULL;
}
