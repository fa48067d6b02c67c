/*-------------------------------------------------------------------------
 *
 * sg_kafka_drain.c
 *		The benchmark's baseline: a plain librdkafka consumer outside
 *		PostgreSQL doing what a Kafka pipeline does, exactly once.
 *
 * Usage: sg_kafka_drain BOOTSTRAP TOPIC NPARTS TOTAL BATCH CONNINFO
 *
 * Reads TOPIC (read_committed, every partition assigned from the start) and
 * for every BATCH messages runs one PostgreSQL transaction: COPY of
 * (i, partition, off, payload) into table drain_sink — i from the JSON
 * value {"i": n}, payload the value itself (parsed into jsonb by the
 * server) — and the partitions' next offsets into drain_offsets, then
 * COMMIT: the effects and the offsets in one transaction, as the pipeline
 * does.  Stops after TOTAL messages and prints the seconds it took from
 * the first poll.  Built by "make kafka-tools" (never installed); used by
 * test/bench/kafka/run.pl.
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void
must(PGconn *conn, PGresult *res, ExecStatusType want)
{
	if (PQresultStatus(res) != want)
	{
		fprintf(stderr, "sg_kafka_drain: %s", PQerrorMessage(conn));
		exit(1);
	}
	PQclear(res);
}

int
main(int argc, char **argv)
{
	char		err[512];
	rd_kafka_conf_t *conf;
	rd_kafka_t *rk;
	rd_kafka_topic_partition_list_t *list;
	PGconn	   *conn;
	int			nparts,
				batch,
				p;
	long		total,
				done = 0,
				inbatch = 0;
	long long  *next;
	char	   *buf;
	size_t		buflen = 0,
				bufcap = 1 << 20;
	double		t0 = 0;

	if (argc != 7)
	{
		fprintf(stderr, "usage: sg_kafka_drain BOOTSTRAP TOPIC NPARTS TOTAL BATCH CONNINFO\n");
		return 2;
	}
	nparts = atoi(argv[3]);
	total = atol(argv[4]);
	batch = atoi(argv[5]);
	next = calloc(nparts, sizeof(long long));
	buf = malloc(bufcap);

	conn = PQconnectdb(argv[6]);
	if (PQstatus(conn) != CONNECTION_OK)
	{
		fprintf(stderr, "sg_kafka_drain: %s", PQerrorMessage(conn));
		return 1;
	}

	conf = rd_kafka_conf_new();
	rd_kafka_conf_set(conf, "bootstrap.servers", argv[1], err, sizeof(err));
	rd_kafka_conf_set(conf, "group.id", "sg-kafka-drain", err, sizeof(err));
	rd_kafka_conf_set(conf, "isolation.level", "read_committed", err, sizeof(err));
	rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof(err));
	rd_kafka_conf_set(conf, "enable.auto.offset.store", "false", err, sizeof(err));
	rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
	if (!rk)
	{
		fprintf(stderr, "sg_kafka_drain: %s\n", err);
		return 1;
	}
	list = rd_kafka_topic_partition_list_new(nparts);
	for (p = 0; p < nparts; p++)
		rd_kafka_topic_partition_list_add(list, argv[2], p)->offset = RD_KAFKA_OFFSET_BEGINNING;
	rd_kafka_assign(rk, list);
	rd_kafka_topic_partition_list_destroy(list);

	while (done < total)
	{
		rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);

		if (m == NULL)
		{
			if (inbatch == 0)
				continue;
		}
		else
		{
			const char *v;
			long		i = -1;

			if (t0 == 0)
				t0 = now();
			if (m->err)
			{
				rd_kafka_message_destroy(m);
				continue;
			}
			v = m->payload ? memchr(m->payload, ':', m->len) : NULL;
			if (v)
				i = strtol(v + 1, NULL, 10);
			/* the test's values need no COPY escaping: no tab, newline or backslash */
			while (bufcap - buflen < m->len + 64)
			{
				bufcap *= 2;
				buf = realloc(buf, bufcap);
			}
			buflen += snprintf(buf + buflen, bufcap - buflen, "%ld\t%d\t%lld\t%.*s\n",
							   i, (int) m->partition, (long long) m->offset, (int) m->len,
							   m->payload ? (const char *) m->payload : "null");
			if (m->partition >= 0 && m->partition < nparts)
				next[m->partition] = m->offset + 1;
			rd_kafka_message_destroy(m);
			inbatch++;
			done++;
			if (inbatch < batch && done < total)
				continue;
		}
		/* one transaction: the rows and the offsets */
		must(conn, PQexec(conn, "BEGIN"), PGRES_COMMAND_OK);
		must(conn, PQexec(conn, "COPY drain_sink (i, partition, off, payload) FROM STDIN"), PGRES_COPY_IN);
		if (PQputCopyData(conn, buf, (int) buflen) != 1 || PQputCopyEnd(conn, NULL) != 1)
		{
			fprintf(stderr, "sg_kafka_drain: %s", PQerrorMessage(conn));
			return 1;
		}
		must(conn, PQgetResult(conn), PGRES_COMMAND_OK);
		for (p = 0; p < nparts; p++)
		{
			char		sql[160];

			snprintf(sql, sizeof(sql),
					 "UPDATE drain_offsets SET next_offset = %lld WHERE partition = %d AND next_offset < %lld",
					 next[p], p, next[p]);
			must(conn, PQexec(conn, sql), PGRES_COMMAND_OK);
		}
		must(conn, PQexec(conn, "COMMIT"), PGRES_COMMAND_OK);
		buflen = 0;
		inbatch = 0;
	}
	printf("%.3f\n", now() - t0);
	rd_kafka_destroy(rk);
	PQfinish(conn);
	return 0;
}
