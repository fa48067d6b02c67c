#!/usr/bin/env bash
# make valgrind: the pg_regress and isolation suites with every server
# process under valgrind memcheck.
#
# A directory of symlinks to the PostgreSQL binaries stands in for the
# bindir, with `postgres` replaced by a wrapper that runs the real binary
# under valgrind (the postmaster and everything it forks: backends, our
# launcher, maintenance and pipeline workers).  initdb resolves its own
# symlink and finds the real postgres, so the temporary instances are
# created natively.  One valgrind log per process goes to
# $SG_VALGRIND_DIR/logs (default tmp_valgrind/ in the source tree); the
# suppressions are ours, in test/valgrind.supp.
#
# The last lines list the logs with errors; exit status 1 if there are
# any, or if a suite failed.  Expect 15-40 minutes on two cores.
#
# Environment: PG_CONFIG (default pg_config), SG_VALGRIND_DIR,
#              SG_VALGRIND_SUITES ("regress isolation", or one of them),
#              SG_VALGRIND_OPTS (extra valgrind options).
set -uo pipefail

PG_CONFIG=${PG_CONFIG:-pg_config}
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${SG_VALGRIND_DIR:-$SRC/tmp_valgrind}
SUITES=${SG_VALGRIND_SUITES:-regress isolation}
BINDIR=$("$PG_CONFIG" --bindir)

command -v valgrind >/dev/null || { echo "valgrind: not installed (scripts/install-deps.sh installs it)" >&2; exit 1; }

rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/logs"
for f in "$BINDIR"/*; do
    ln -s "$f" "$OUT/bin/$(basename "$f")"
done
rm "$OUT/bin/postgres"
cat > "$OUT/bin/postgres" <<WRAPPER
#!/bin/sh
# version checks and bootstrap / single-user runs stay native
case " \$* " in
    *" -V "*|*" --version "*|*" --boot "*|*" --single "*|*" --check "*|*" -C "*|*" --describe-config "*)
        exec "$BINDIR/postgres" "\$@" ;;
esac
exec valgrind --quiet --tool=memcheck --trace-children=yes --leak-check=no \\
    --track-origins=yes --read-var-info=no --num-callers=30 --error-limit=no \\
    --gen-suppressions=all --suppressions="$SRC/test/valgrind.supp" \\
    ${SG_VALGRIND_OPTS:-} --log-file="$OUT/logs/%p.log" "$BINDIR/postgres" "\$@"
WRAPPER
chmod +x "$OUT/bin/postgres"

# the postmaster needs far longer than the default minute to start under valgrind
export PGCTLTIMEOUT=${PGCTLTIMEOUT:-900}

failed=0
for suite in $SUITES; do
    case $suite in
        regress)   args=(ISOLATION= TAP_TESTS=) ;;
        isolation) args=(REGRESS= TAP_TESTS=) ;;
        *) echo "valgrind: unknown suite $suite" >&2; exit 2 ;;
    esac
    echo "== $suite under valgrind"
    make -C "$SRC" installcheck PG_CONFIG="$PG_CONFIG" bindir="$OUT/bin" "${args[@]}" || failed=1
done

# with --quiet a log holds only errors (and the suppressions to silence them)
bad=$(find "$OUT/logs" -name '*.log' -size +0 | sort)
if [ -n "$bad" ]; then
    echo "== valgrind reported errors in $(echo "$bad" | wc -l) process(es):"
    for f in $bad; do
        echo "-- $f"
        grep -m1 -A12 '^==[0-9]*== [A-Z]' "$f"
    done
    exit 1
fi
[ $failed -eq 0 ] || { echo "== a suite failed (see regression.diffs / output_iso)"; exit 1; }
echo "== valgrind: no errors in $(ls "$OUT/logs" | wc -l) process logs"
