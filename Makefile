# streamguard — PGXS build
EXTENSION = streamguard
MODULE_big = streamguard
OBJS = $(patsubst %.c,%.o,$(wildcard src/*.c))
DATA = $(wildcard streamguard--*.sql)

PG_CONFIG ?= pg_config
PG_CPPFLAGS = -I$(srcdir)/src -I$(shell $(PG_CONFIG) --includedir)
SHLIB_LINK_INTERNAL = $(libpq) -lrdkafka
PG_CFLAGS = -Wall -Wmissing-prototypes -Werror

# pg_regress: sql/<name>.sql against expected/<name>.out, on a throwaway
# instance with the library preloaded (test/regress.conf).
REGRESS = $(sort $(notdir $(basename $(wildcard sql/*.sql))))
REGRESS_OPTS = --temp-instance=tmp_check_regress --temp-config=$(srcdir)/test/regress.conf

ISOLATION = $(sort $(notdir $(basename $(wildcard test/isolation/specs/*.spec))))
ISOLATION_OPTS = --inputdir=$(srcdir)/test/isolation --outputdir=output_iso \
	--temp-instance=tmp_check_iso --temp-config=$(srcdir)/test/regress.conf

TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl

EXTRA_CLEAN = tools/sgctl/sgctl tmp_valgrind tmp_check_regress tmp_check_iso output_iso results regression.diffs regression.out log

# rebuild what includes a changed header (dependency files under .deps/)
override autodepend = yes

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# after the include: PGXS resets it
PROVE_FLAGS += --verbose

# sgctl, the command-line tool (tools/sgctl/, libpq only).  PGXS builds one
# module or one program per makefile, so the tool has explicit rules here:
# built by "make", installed into pg_config's bindir by "make install".
SGCTL = tools/sgctl/sgctl
SGCTL_SRCS = $(sort $(wildcard tools/sgctl/*.c))
SGCTL_CFLAGS = -O2 -g -std=gnu11 -Wall -Wextra -Wmissing-prototypes -Werror
SGCTL_INCLUDEDIR := $(shell $(PG_CONFIG) --includedir)
SGCTL_LIBDIR := $(shell $(PG_CONFIG) --libdir)

all: $(SGCTL)

$(SGCTL): $(SGCTL_SRCS) tools/sgctl/sgctl.h
	$(CC) $(SGCTL_CFLAGS) -I$(SGCTL_INCLUDEDIR) -o $@ $(SGCTL_SRCS) -L$(SGCTL_LIBDIR) -lpq

install: install-sgctl

.PHONY: install-sgctl uninstall-sgctl
install-sgctl: $(SGCTL)
	$(MKDIR_P) '$(DESTDIR)$(bindir)'
	$(INSTALL_PROGRAM) $(SGCTL) '$(DESTDIR)$(bindir)/sgctl'

uninstall: uninstall-sgctl
uninstall-sgctl:
	rm -f '$(DESTDIR)$(bindir)/sgctl'
# The Kafka test broker (librdkafka's mock cluster) the TAP tests start;
# built by installcheck, never installed.  See docs/kafka.md.
KAFKA_TOOLS = test/kafka/sg_mock_broker test/kafka/sg_kafka_drain test/kafka/sg_kafka_produce
EXTRA_CLEAN += $(KAFKA_TOOLS)

test/kafka/%: test/kafka/%.c
	$(CC) $(CFLAGS) -Wall -Werror -I$(shell $(PG_CONFIG) --includedir) -o $@ $< -L$(shell $(PG_CONFIG) --libdir) -lpq -lrdkafka -lpthread

.PHONY: kafka-tools
kafka-tools: $(KAFKA_TOOLS)
installcheck: kafka-tools

# The benchmark suite (not part of installcheck): see docs/benchmarks.md.
# PG_CONFIG from the environment selects the installation; the driver finds
# PostgreSQL's TAP modules (PostgreSQL::Test::Cluster) through it.
.PHONY: bench
bench:
	perl test/bench/run.pl

# docs/diagrams/*.dot -> PNG next to them (needs Graphviz's dot; on Debian:
# apt-get install graphviz).  The PNGs are committed.
DIAGRAMS = $(patsubst %.dot,%.png,$(wildcard docs/diagrams/*.dot))

.PHONY: diagrams
diagrams: $(DIAGRAMS)

docs/diagrams/%.png: docs/diagrams/%.dot
	dot -Tpng -Gdpi=110 -o $@ $<

# Mutation testing (not part of installcheck): see docs/testing.md.
# SG_MUTANTS=name,name runs a subset.
.PHONY: mutation
mutation:
	PG_CONFIG=$(PG_CONFIG) perl test/mutation/run.pl

# regress and isolation suites with the server under valgrind memcheck
.PHONY: valgrind
valgrind:
	PG_CONFIG=$(PG_CONFIG) test/valgrind.sh

# Every test layer on every PostgreSQL major scripts/test.sh finds (the whole
# TAP layer on each, not only the compat set): see docs/testing.md.
.PHONY: check-all-majors
check-all-majors:
	SG_TAP_ALL=1 bash scripts/test.sh
