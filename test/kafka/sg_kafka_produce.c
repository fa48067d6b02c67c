/*-------------------------------------------------------------------------
 *
 * sg_kafka_produce.c
 *		The sink benchmark's baseline: a plain librdkafka producer outside
 *		PostgreSQL doing what a Kafka sink pipeline does, without its
 *		guarantees.
 *
 * Usage: sg_kafka_produce BOOTSTRAP TOPIC CONNINFO STREAM NPARTS TOTAL BATCH [end]
 *
 * Reads the events of STREAM (partitions 0 .. NPARTS-1, BATCH events per
 * streamguard.read call, partition after partition in turn) and produces
 * each as a message of TOPIC: key the event's key, value its payload as
 * JSON text, partition the event's partition, with an idempotent producer
 * (acks=all, linger.ms=0 as the pipeline's).  After each read it waits
 * until every message is acknowledged (rd_kafka_flush) — what a client
 * that then records its progress has to do — or, with "end", only once
 * after the last.  Stops after TOTAL events and prints the seconds from the
 * first read to the end of the last flush.  No transaction, no positions
 * kept.  Built by "make kafka-tools" (never
 * installed); used by test/bench/kafka/run.pl.
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

static long failed = 0;

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void
dr(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	(void) rk;
	(void) opaque;
	if (m->err)
		failed++;
}

int
main(int argc, char **argv)
{
	char		err[512];
	rd_kafka_conf_t *conf;
	rd_kafka_t *rk;
	rd_kafka_topic_t *rkt;
	PGconn	   *pg;
	int			nparts;
	long		total,
				batch,
				done = 0;
	long long  *after;
	int			p = 0;
	int			idle = 0;
	double		t0;

	int			flush_each;

	if (argc != 8 && !(argc == 9 && strcmp(argv[8], "end") == 0))
	{
		fprintf(stderr, "usage: sg_kafka_produce BOOTSTRAP TOPIC CONNINFO STREAM NPARTS TOTAL BATCH [end]\n");
		return 2;
	}
	flush_each = argc == 8;
	nparts = atoi(argv[5]);
	total = atol(argv[6]);
	batch = atol(argv[7]);
	after = calloc(nparts, sizeof(long long));

	conf = rd_kafka_conf_new();
	if (rd_kafka_conf_set(conf, "bootstrap.servers", argv[1], err, sizeof(err)) ||
		rd_kafka_conf_set(conf, "enable.idempotence", "true", err, sizeof(err)) ||
		rd_kafka_conf_set(conf, "acks", "all", err, sizeof(err)) ||
		rd_kafka_conf_set(conf, "linger.ms", "0", err, sizeof(err)))
	{
		fprintf(stderr, "sg_kafka_produce: %s\n", err);
		return 1;
	}
	rd_kafka_conf_set_dr_msg_cb(conf, dr);
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
	if (rk == NULL)
	{
		fprintf(stderr, "sg_kafka_produce: %s\n", err);
		return 1;
	}
	rkt = rd_kafka_topic_new(rk, argv[2], NULL);
	pg = PQconnectdb(argv[3]);
	if (PQstatus(pg) != CONNECTION_OK)
	{
		fprintf(stderr, "sg_kafka_produce: %s", PQerrorMessage(pg));
		return 1;
	}

	t0 = now();
	while (done < total)
	{
		char		part[16],
					aft[32],
					max[32];
		const char *params[4] = {argv[4], part, aft, max};
		PGresult   *res;
		int			i,
					n;

		snprintf(part, sizeof(part), "%d", p);
		snprintf(aft, sizeof(aft), "%lld", after[p]);
		snprintf(max, sizeof(max), "%ld", batch);
		res = PQexecParams(pg, "SELECT seq, key, payload::text FROM streamguard.read($1, $2::int, $3::bigint, $4::int)",
						   4, NULL, params, NULL, NULL, 0);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			fprintf(stderr, "sg_kafka_produce: %s", PQerrorMessage(pg));
			return 1;
		}
		n = PQntuples(res);
		for (i = 0; i < n && done < total; i++)
		{
			const char *key = PQgetisnull(res, i, 1) ? NULL : PQgetvalue(res, i, 1);
			const char *value = PQgetvalue(res, i, 2);

			for (;;)
			{
				rd_kafka_resp_err_t e = rd_kafka_producev(rk,
														  RD_KAFKA_V_RKT(rkt),
														  RD_KAFKA_V_PARTITION(p),
														  RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
														  RD_KAFKA_V_KEY(key, key ? strlen(key) : 0),
														  RD_KAFKA_V_VALUE((void *) value, strlen(value)),
														  RD_KAFKA_V_END);

				if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
					break;
				if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL)
				{
					fprintf(stderr, "sg_kafka_produce: %s\n", rd_kafka_err2str(e));
					return 1;
				}
				rd_kafka_poll(rk, 10);
			}
			after[p] = atoll(PQgetvalue(res, i, 0));
			done++;
		}
		PQclear(res);
		if (flush_each && n > 0 && rd_kafka_flush(rk, 600000) != RD_KAFKA_RESP_ERR_NO_ERROR)
		{
			fprintf(stderr, "sg_kafka_produce: flush timed out\n");
			return 1;
		}
		rd_kafka_poll(rk, 0);
		idle = n == 0 ? idle + 1 : 0;
		if (idle > 10 * nparts)
		{
			fprintf(stderr, "sg_kafka_produce: only %ld of %ld events in the stream\n", done, total);
			return 1;
		}
		p = (p + 1) % nparts;
	}
	if (rd_kafka_flush(rk, 600000) != RD_KAFKA_RESP_ERR_NO_ERROR || failed > 0)
	{
		fprintf(stderr, "sg_kafka_produce: %ld messages not delivered\n", failed);
		return 1;
	}
	printf("%.3f\n", now() - t0);
	rd_kafka_topic_destroy(rkt);
	rd_kafka_destroy(rk);
	PQfinish(pg);
	return 0;
}
