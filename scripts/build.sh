#!/usr/bin/env bash
# Build and install streamguard against PostgreSQL 15.
# As root: installs missing dependencies first, then `make` and `make install`.
#   build.sh          the dependencies of everything, the test suites included
#   build.sh --demo   only those of the build and the demo (scripts/install-deps.sh --demo)
# As another user: skips the package step; installs only if the PostgreSQL
# directories are writable.
set -euo pipefail
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"

trap 'rc=$?; printf "\nbuild.sh: FAILED (exit %s) at line %s: %s\n" "$rc" "$LINENO" "$BASH_COMMAND" >&2; exit $rc' ERR

deps_mode=()
case "${1:-}" in
    "") ;;
    --demo) deps_mode=(--demo) ;;
    *) sg_die "usage: build.sh [--demo]" ;;
esac

if sg_is_root; then
    bash "$SG_ROOT/scripts/install-deps.sh" "${deps_mode[@]}"
else
    sg_log "build: not root, skipping dependency installation (assuming PostgreSQL ${PG_MAJOR} and its dev packages are installed)"
    [ -x "$PG_CONFIG" ] || sg_die "build: $PG_CONFIG not found; run 'bash scripts/install-deps.sh' as root first"
fi

cd "$SG_ROOT"
jobs=$(nproc 2>/dev/null || echo 2)
sg_log "build: make PG_CONFIG=$PG_CONFIG (in $SG_ROOT)"
make -j"$jobs" PG_CONFIG="$PG_CONFIG" </dev/null

pkglibdir=$("$PG_CONFIG" --pkglibdir)
sharedir=$("$PG_CONFIG" --sharedir)
if sg_is_root || { [ -w "$pkglibdir" ] && [ -w "$sharedir/extension" ]; }; then
    sg_log "build: make install PG_CONFIG=$PG_CONFIG"
    make PG_CONFIG="$PG_CONFIG" install </dev/null
else
    sg_log "build: not root and $pkglibdir is not writable, skipping 'make install'"
    if [ ! -f "$pkglibdir/$SG_EXT.so" ]; then
        sg_warn "$SG_EXT is not installed in $pkglibdir; run 'bash scripts/build.sh' as root"
    elif [ -f "$SG_EXT.so" ] && ! cmp -s "$SG_EXT.so" "$pkglibdir/$SG_EXT.so"; then
        sg_warn "the installed $pkglibdir/$SG_EXT.so differs from the one just built (stale install?)"
    fi
fi
# sgctl lands in PostgreSQL's bindir, which is not on a usual PATH: as root,
# link it from /usr/local/bin (unless something else already owns that name)
bindir=$("$PG_CONFIG" --bindir)
if sg_is_root && [ -x "$bindir/sgctl" ]; then
    link=/usr/local/bin/sgctl
    if [ -L "$link" ] || [ ! -e "$link" ]; then
        ln -sfn "$bindir/sgctl" "$link"
        sg_log "build: $link -> $bindir/sgctl"
    else
        sg_warn "$link exists and is not a symlink; leaving it alone (sgctl is $bindir/sgctl)"
    fi
fi
sg_log "build: done"
