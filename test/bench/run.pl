#!/usr/bin/perl
#
# streamguard benchmark suite (`make bench`).  See docs/benchmarks.md.
#
# Starts throwaway PostgreSQL clusters (PostgreSQL::Test::Cluster: fresh
# initdb in a temp dir, unix socket + 127.0.0.1), measures streamguard against
# raw PostgreSQL and PgQ in ONE run, prints a results table and writes it to
# bench-results/latest.md.  Only the clusters and the processes the suite
# starts are stopped, by pid; every wait is bounded.
#
# This file only dispatches.  Each benchmark is a module,
# test/bench/lib/Bench/<Name>.pm, listed in lib/Bench/Registry.pm (BENCH_ONLY
# picks among them); the machinery they share is lib/Bench.pm and the
# modules beside it (docs/benchmarks.md, "Where things are").
#
# Run as root (the server work is re-executed as the `postgres` OS user via
# runuser) or as an unprivileged user that can run PostgreSQL.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";
use Bench::Outer;

# Started by a user (no --inner): prepare a temp dir, re-run this script there
# as the cluster's OS user, publish the results, clean up and exit.  This runs
# before the test modules below load: they redirect STDOUT and STDERR to a log
# file and create directories as soon as they are loaded.
BEGIN { Bench::Outer::main($0) unless ($ARGV[0] // '') eq '--inner' }

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils ();
use Bench::Suite;

exit Bench::Suite::main($ARGV[1], $FindBin::RealBin);
