/*-------------------------------------------------------------------------
 *
 * kafka_call.c
 *		The librdkafka calls that may wait, each made on a thread of its
 *		own while the backend waits on its latch (sg_kafka_call; the why
 *		is in kafka.c's banner), the backend's waits on a handle's pipe,
 *		and the errors raised from Kafka's codes.
 *
 * A call's thread runs one of the sg_call_* bodies: librdkafka calls and
 * malloc/free only, its arguments and results in its SgKafkaCall; it
 * ends by setting `done` under the call's lock and writing a byte into
 * the handle's pipe.  The backend takes that lock only to read `done`,
 * never across a PostgreSQL call; an ERROR while it waits leaves the call
 * to the client's close (kafka.c), which joins the thread first.
 *
 * Exported (kafka_int.h, for the other kafka*.c files): sg_kafka_call_new,
 * sg_kafka_call, the sg_call_* bodies, sg_kafka_pause, sg_kafka_left_ms,
 * sg_kafka_drain_pipe, sg_kafka_wait, sg_kafka_raise_error; and KafkaRaise
 * (io/kafka.h).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/pmsignal.h"
#include "utils/timestamp.h"

#include "io/kafka_int.h"
#include "io/remote.h"

/* ------------------------------------------ calls that may wait, on a thread */

/*
 * The calls sg_kafka_call runs on their thread: librdkafka calls and
 * malloc/free only, arguments and results in the SgKafkaCall.
 */
void
sg_call_metadata(SgKafkaCall *c)
{
	rd_kafka_topic_t *rkt = rd_kafka_topic_new(c->rk, c->topic, NULL);
	const struct rd_kafka_metadata *md = NULL;

	c->partitions = -1;
	if (rkt == NULL)
	{
		/* reported as the topic's error */
		c->err = RD_KAFKA_RESP_ERR_NO_ERROR;
		c->topic_err = rd_kafka_last_error();
		return;
	}
	c->err = rd_kafka_metadata(c->rk, 0, rkt, &md, c->timeout_ms);
	if (c->err == RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		if (md->topic_cnt == 1)
		{
			c->topic_err = md->topics[0].err;
			if (md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
				c->partitions = md->topics[0].partition_cnt;
		}
		else
			c->topic_err = RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
		rd_kafka_metadata_destroy(md);
	}
	/* never left behind: it would hold up the client's end */
	rd_kafka_topic_destroy(rkt);
}

void
sg_call_watermarks(SgKafkaCall *c)
{
	int64_t		lo = -1,
				hi = -1;

	c->err = rd_kafka_query_watermark_offsets(c->rk, c->topic, c->partition, &lo, &hi, c->timeout_ms);
	c->lo = (int64) lo;
	c->hi = (int64) hi;
}

void
sg_call_seek(SgKafkaCall *c)
{
	rd_kafka_error_t *error = rd_kafka_seek_partitions(c->rk, c->list, c->timeout_ms);

	c->err = error ? rd_kafka_error_code(error) : c->list->elems[0].err;
	if (error)
		rd_kafka_error_destroy(error);
}

/* rd_kafka_assign waits, without a timeout, for librdkafka's main thread */
void
sg_call_assign(SgKafkaCall *c)
{
	c->err = rd_kafka_assign(c->rk, c->list);
}

void
sg_call_assign_more(SgKafkaCall *c)
{
	c->error = rd_kafka_incremental_assign(c->rk, c->list);
}

void
sg_call_init(SgKafkaCall *c)
{
	c->error = rd_kafka_init_transactions(c->rk, c->timeout_ms);
}

/* rd_kafka_begin_transaction waits, without a timeout, for librdkafka's main thread */
void
sg_call_begin(SgKafkaCall *c)
{
	c->error = rd_kafka_begin_transaction(c->rk);
}

void
sg_call_commit(SgKafkaCall *c)
{
	c->error = rd_kafka_commit_transaction(c->rk, c->timeout_ms);
}

static void *
sg_kafka_call_main(void *arg)
{
	SgKafkaCall *c = (SgKafkaCall *) arg;

	c->fn(c);
	pthread_mutex_lock(&c->lock);
	c->done = true;
	pthread_mutex_unlock(&c->lock);
	if (write(c->wake_fd, "1", 1) < 0)
		(void) 0;				/* the waiter also looks at done every 100 ms */
	return NULL;
}

/*
 * A call of `fn` on `k`, not started yet, with its own copy of `topic`
 * (or NULL).  A call the backend gave up on and that has ended since is
 * reaped here; one still running makes the client unusable (every error
 * path closes it).
 */
SgKafkaCall *
sg_kafka_call_new(SgKafka *k, SgKafkaCallFn fn, const char *topic)
{
	SgKafkaCall *c;

	if (k->call)
	{
		bool		done;

		pthread_mutex_lock(&k->call->lock);
		done = k->call->done;
		pthread_mutex_unlock(&k->call->lock);
		if (!done)
			elog(ERROR, "a Kafka call is still running on this client");
		sg_kafka_call_end(k->call);
		k->call = NULL;
	}
	c = malloc(sizeof(SgKafkaCall));
	if (c == NULL)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
	memset(c, 0, sizeof(SgKafkaCall));
	pthread_mutex_init(&c->lock, NULL);
	c->rk = k->rk;
	c->fn = fn;
	c->wake_fd = k->pipe_fd[1];
	if (topic)
	{
		c->topic = strdup(topic);
		if (c->topic == NULL)
		{
			sg_kafka_call_free(c);
			ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
		}
	}
	return c;
}

/*
 * THE way to make a librdkafka call that may wait: `c` (sg_kafka_call_new,
 * its arguments set) runs on a thread of its own, all signals blocked,
 * with librdkafka's timeout `timeout_ms`, while the backend waits on its
 * latch and the handle's pipe (which the thread writes when done),
 * serving a producer's queue meanwhile and checking interrupts: a SIGTERM
 * ends the process, a cancel raises, at once.  At `give_up` (a deadline of
 * streamguard.remote_timeout, plus a second for librdkafka's own timeout
 * to fire first) the backend gives up with an error, whatever librdkafka
 * does.  Returns with `c` done (its results to read, then
 * sg_kafka_call_free); after an error the call belongs to the client,
 * whose destroy (KafkaClose's reaper) joins the thread first.
 */
void
sg_kafka_call(SgKafka *k, SgKafkaCall *c, const char *what, int timeout_ms, TimestampTz give_up,
			  uint32 wait_event)
{
	sigset_t	all,
				old;
	int			rc;

	c->timeout_ms = Max(timeout_ms, 1);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&c->thread, NULL, sg_kafka_call_main, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
	{
		sg_kafka_call_free(c);
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("could not start a thread for a Kafka call: %s", strerror(rc))));
	}
	/* from here an ERROR leaves the call to KafkaClose */
	k->call = c;
	for (;;)
	{
		bool		done;

		sg_kafka_drain_pipe(k);
		/* a producer's delivery reports; a consumer's queue is KafkaPoll's */
		if (k->producer)
			(void) rd_kafka_poll(k->rk, 0);
		pthread_mutex_lock(&c->lock);
		done = c->done;
		pthread_mutex_unlock(&c->lock);
		if (done)
			break;
		if (!PostmasterIsAlive())
			proc_exit(1);
		if (GetCurrentTimestamp() >= give_up)
			KafkaRaise(k, RD_KAFKA_RESP_ERR__TIMED_OUT,
					   psprintf("%s: no answer within streamguard.remote_timeout (%d ms)", what, sg_remote_timeout_ms));
		sg_kafka_wait(k, give_up, wait_event);
	}
	pthread_join(c->thread, NULL);
	k->call = NULL;
}

/* a pause between two calls (a retry), on the latch */
void
sg_kafka_pause(long ms)
{
	int			rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms, PG_WAIT_EXTENSION);

	if (rc & WL_LATCH_SET)
		ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/* milliseconds until `deadline` (at least 1) */
int
sg_kafka_left_ms(TimestampTz deadline)
{
	int64		left = (deadline - GetCurrentTimestamp()) / 1000;

	return (int) Max(Min(left, INT_MAX), 1);
}
void
sg_kafka_drain_pipe(SgKafka *k)
{
	char		buf[64];

	while (read(k->pipe_fd[0], buf, sizeof(buf)) > 0)
		;
}

/* wait for the producer's queue, the latch, or `deadline` (at most 100 ms) */
void
sg_kafka_wait(SgKafka *k, TimestampTz deadline, uint32 wait_event)
{
	long		left = (long) ((deadline - GetCurrentTimestamp()) / 1000);
	int			rc;

	if (left <= 0)
		return;
	rc = WaitLatchOrSocket(MyLatch, WL_LATCH_SET | WL_SOCKET_READABLE | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						   k->pipe_fd[0], Min(left, 100), wait_event);
	if (rc & WL_LATCH_SET)
	{
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

static int
sg_kafka_sqlstate(rd_kafka_resp_err_t err)
{
	switch (err)
	{
		case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
		case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
		case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
			return ERRCODE_UNDEFINED_OBJECT;
		case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
		case RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED:
		case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
			return ERRCODE_INSUFFICIENT_PRIVILEGE;
		case RD_KAFKA_RESP_ERR__AUTHENTICATION:
		case RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED:
			return ERRCODE_INVALID_AUTHORIZATION_SPECIFICATION;
		case RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE:
		case RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET:
			return ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE;
		case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
			return ERRCODE_PROGRAM_LIMIT_EXCEEDED;
		case RD_KAFKA_RESP_ERR_PRODUCER_FENCED:
		case RD_KAFKA_RESP_ERR__FENCED:
		case RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH:
		case RD_KAFKA_RESP_ERR_CONCURRENT_TRANSACTIONS:
			/* another incarnation took over: retried with a new producer */
			return ERRCODE_T_R_SERIALIZATION_FAILURE;
		default:
			return ERRCODE_CONNECTION_FAILURE;
	}
}

/*
 * Raise a Kafka error: the server's name and what we were doing, Kafka's
 * error name and code, and the last thing librdkafka reported.
 */
void
KafkaRaise(SgKafka *k, rd_kafka_resp_err_t err, const char *what)
{
	char		last[256];

	KafkaLastError(k, last, sizeof(last));
	ereport(ERROR,
			(errcode(sg_kafka_sqlstate(err)),
			 errmsg("Kafka server \"%s\": %s: %s (%s)", k->server, what, rd_kafka_err2str(err),
					rd_kafka_err2name(err)),
			 errdetail("Kafka error %s (%d).%s%s", rd_kafka_err2name(err), (int) err,
					   last[0] ? " Last client report: " : "", last)));
}

/* raise a transactional API error: its code, its text, what we were doing */
void
sg_kafka_raise_error(SgKafka *k, rd_kafka_error_t *error, const char *what)
{
	rd_kafka_resp_err_t err = rd_kafka_error_code(error);
	char	   *text = pstrdup(rd_kafka_error_string(error));
	bool		fatal = rd_kafka_error_is_fatal(error);
	char		last[256];

	rd_kafka_error_destroy(error);
	KafkaLastError(k, last, sizeof(last));
	ereport(ERROR,
			(errcode(sg_kafka_sqlstate(err)),
			 errmsg("Kafka server \"%s\": %s: %s (%s)", k->server, what, text, rd_kafka_err2name(err)),
			 errdetail("Kafka error %s (%d)%s.%s%s", rd_kafka_err2name(err), (int) err,
					   fatal ? ", fatal for this producer" : "",
					   last[0] ? " Last client report: " : "", last)));
}

