# streamguard — PGXS build
EXTENSION = streamguard
MODULE_big = streamguard
OBJS = $(patsubst %.c,%.o,$(sort $(wildcard src/*.c src/*/*.c)))
# The SQL scripts of the current version are built from src/sql/ (make
# runs cat): the install script from the objects and the parts every update
# states again in full, the update script from the previous version from its
# own changes and the same parts.  The scripts of released versions are
# committed as they were released (docs/internals.md, "The SQL side").
SQL_PARTS = src/sql/views.sql src/sql/metrics.sql src/sql/privileges.sql \
	src/sql/comments.sql src/sql/verify.sql
DATA_built = streamguard--0.3.sql streamguard--0.2--0.3.sql
DATA = $(filter-out $(DATA_built),$(wildcard streamguard--*.sql)) $(wildcard streamguard--*.control)

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

EXTRA_CLEAN = tools/sgctl/sgctl tools/sgctl/console_assets.h tmp_valgrind tmp_check_regress tmp_check_iso output_iso results regression.diffs regression.out log

# rebuild what includes a changed header (dependency files under .deps/)
override autodepend = yes

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# after the include: PGXS resets it
PROVE_FLAGS += --verbose

# the built scripts: a first line that says where they come from, then the
# parts in order
streamguard--0.3.sql: src/sql/objects.sql $(SQL_PARTS)
	{ echo '-- Built by make from src/sql/ ($(notdir $^)): edit those.'; cat $^; } > $@.tmp && mv $@.tmp $@

streamguard--0.2--0.3.sql: src/sql/update--0.2--0.3.sql $(SQL_PARTS)
	{ echo '-- Built by make from src/sql/ ($(notdir $^)): edit those.'; cat $^; } > $@.tmp && mv $@.tmp $@

# sgctl, the command-line tool (tools/sgctl/, libpq only).  PGXS builds one
# module or one program per makefile, so the tool has explicit rules here:
# built by "make", installed into pg_config's bindir by "make install".
SGCTL = tools/sgctl/sgctl
SGCTL_SRCS = $(sort $(wildcard tools/sgctl/*.c))
SGCTL_CFLAGS = -O2 -g -std=gnu11 -Wall -Wextra -Wmissing-prototypes -Werror
SGCTL_INCLUDEDIR := $(shell $(PG_CONFIG) --includedir)
SGCTL_LIBDIR := $(shell $(PG_CONFIG) --libdir)

# sgctl serve's page, built into the binary as C strings by a portable awk
# script (no network, no npm, no xxd)
SGCTL_ASSETS = tools/sgctl/console.html tools/sgctl/console.js tools/sgctl/console.css

all: $(SGCTL)

tools/sgctl/console_assets.h: $(SGCTL_ASSETS) tools/sgctl/embed.awk
	LC_ALL=C awk -f tools/sgctl/embed.awk $(SGCTL_ASSETS) > $@.tmp && mv $@.tmp $@

$(SGCTL): $(SGCTL_SRCS) tools/sgctl/sgctl.h tools/sgctl/console_assets.h
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

# Fuzzing with SQLsmith (not part of installcheck; scripts/test.sh runs a
# short run as its own layer): a private server with every kind of object,
# random queries as an ordinary role and as the objects' owner; pass = no
# crash.  SG_FUZZ_QUERIES (per role), SG_FUZZ_SEED: see docs/testing.md.
.PHONY: fuzz
fuzz:
	$(MAKE) --no-print-directory installcheck PG_CONFIG=$(PG_CONFIG) REGRESS= ISOLATION= \
		PROVE_TESTS=test/fuzz/sqlsmith.pl

# regress and isolation suites with the server under valgrind memcheck
.PHONY: valgrind
valgrind:
	PG_CONFIG=$(PG_CONFIG) test/valgrind.sh

# Packaging (see README.md, "Install into your PostgreSQL"), from the
# committed tree (git archive HEAD): uncommitted changes are not in them.
#   make dist  the PGXN distribution build/streamguard-<version>.zip (META.json)
#              and the same files as build/streamguard-<version>.tar.gz
#   make deb   Debian packages postgresql-NN-streamguard, one per installed
#              postgresql-server-dev-NN, with dpkg-buildpackage into build/deb/
#   test/package/test-deb.sh (as root) installs and tries the package
SG_VERSION := $(shell sed -n "s/^default_version *= *'\([^']*\)'.*/\1/p" streamguard.control).0
SG_DIST = streamguard-$(SG_VERSION)

.PHONY: dist deb
dist:
	@grep -q '"version": *"$(SG_VERSION)"' META.json || { echo "META.json: the version is not $(SG_VERSION)" >&2; exit 1; }
	@head -n1 debian/changelog | grep -q '($(SG_VERSION)-' || { echo "debian/changelog: the version is not $(SG_VERSION)" >&2; exit 1; }
	$(MKDIR_P) build
	git archive --format=zip --prefix=$(SG_DIST)/ -o build/$(SG_DIST).zip HEAD
	git archive --format=tar.gz --prefix=$(SG_DIST)/ -o build/$(SG_DIST).tar.gz HEAD

deb: dist
	rm -rf build/deb
	$(MKDIR_P) build/deb
	cp build/$(SG_DIST).tar.gz build/deb/streamguard_$(SG_VERSION).orig.tar.gz
	tar -xzf build/deb/streamguard_$(SG_VERSION).orig.tar.gz -C build/deb
	cd build/deb/$(SG_DIST) && dpkg-buildpackage -us -uc -b
	@ls build/deb/*.deb

# Every test layer on every PostgreSQL major scripts/test.sh finds (the whole
# TAP layer on each, not only the compat set): see docs/testing.md.
.PHONY: check-all-majors
check-all-majors:
	SG_TAP_ALL=1 bash scripts/test.sh
