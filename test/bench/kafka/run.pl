#!/usr/bin/perl
#
# The Kafka benchmarks on their own: `make bench` with BENCH_ONLY=kafka
# (test/bench/lib/Bench/Kafka.pm; docs/benchmarks.md, "13. Kafka").  Kept for
# the commands in docs/benchmarks-history.md: this driver's own knob names
# are mapped onto the suite's --
#   BENCH_EVENTS     -> BENCH_KAFKA_EVENTS
#   BENCH_BATCH      -> BENCH_KAFKA_BATCH
#   BENCH_DIRECTION  -> BENCH_KAFKA_DIRECTION (both, source: Kafka to
#                       PostgreSQL, sink: PostgreSQL to Kafka)
# -- and the rest (BENCH_REPEAT, BENCH_KEEP, PG_CONFIG, BENCH_OUT ...) are
# the suite's.
#
#   make kafka-tools && perl test/bench/kafka/run.pl   (as root: runs as postgres)

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../lib";
use Bench::Outer;

Bench::Outer::legacy_driver("$FindBin::RealBin/../run.pl", 'kafka',
	{ BENCH_EVENTS => 'BENCH_KAFKA_EVENTS', BENCH_BATCH => 'BENCH_KAFKA_BATCH', BENCH_DIRECTION => 'BENCH_KAFKA_DIRECTION' });
