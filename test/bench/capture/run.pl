#!/usr/bin/perl
#
# The change-capture benchmark on its own: `make bench` with
# BENCH_ONLY=capture (test/bench/lib/Bench/Capture.pm; docs/benchmarks.md,
# "12. Change capture").  Kept for the commands in docs/benchmarks-history.md:
# this driver's own knob names are mapped onto the suite's --
#   BENCH_ONLY (workloads)  -> BENCH_CAPTURE_WORKLOADS
#   BENCH_BATCH             -> BENCH_CAPTURE_BATCH
#   BENCH_ROWS              -> BENCH_CAPTURE_ROWS
# -- and the rest (BENCH_SECONDS, BENCH_SLICES, BENCH_REPEAT, BENCH_CLIENTS,
# BENCH_BATCH_CLIENTS, BENCH_KEEP, PG_CONFIG, BENCH_OUT ...) are the suite's.
#
#   perl test/bench/capture/run.pl          (as root: the server runs as postgres)

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../lib";
use Bench::Outer;

Bench::Outer::legacy_driver("$FindBin::RealBin/../run.pl", 'capture',
	{ BENCH_ONLY => 'BENCH_CAPTURE_WORKLOADS', BENCH_BATCH => 'BENCH_CAPTURE_BATCH', BENCH_ROWS => 'BENCH_CAPTURE_ROWS' });
