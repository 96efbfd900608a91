#!/usr/bin/env bash
# Start a throwaway PostgreSQL 15 cluster for the tuning-DB tests, and print the shell lines that
# point the tests at it (everything else goes to stderr):
#
#   eval "$(bash .ci/start_postgres.sh)"        # sets LOOPNEST_TEST_PG_URL and LOOPNEST_TEST_PG_DIR
#   trap 'bash .ci/start_postgres.sh --stop "$LOOPNEST_TEST_PG_DIR"' EXIT   # stop + delete on exit
#
# On failure it prints `exit 1`, so the eval above stops the calling script instead of letting
# the tests run (and skip) without a server.
#
# initdb refuses to run as root (CI runs as root), so the server runs as the `postgres` OS user,
# created here if missing, on a mktemp directory owned by it. Trust auth, TCP on 127.0.0.1 only.
# Optional: PGPORT_START (default 55432) is the first port tried.
set -euo pipefail

as_postgres() {
    if [ "$(id -un)" = postgres ]; then bash -c "$1"; else su postgres -s /bin/bash -c "$1"; fi
}

fail() {
    echo "start_postgres.sh: $*" >&2
    echo "exit 1"
    exit 1
}

if [ "${1:-}" = "--stop" ]; then
    dir="${2:?usage: start_postgres.sh --stop DIR}"
    as_postgres "'$(command -v pg_ctl)' -D '$dir/data' -m fast -w stop" >&2 || true
    rm -rf "$dir"
    exit 0
fi

initdb_bin="$(command -v initdb)" || fail "initdb is not on PATH"
pg_ctl_bin="$(command -v pg_ctl)" || fail "pg_ctl is not on PATH"

if ! id postgres >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin postgres >&2 \
        || fail "cannot create the postgres user"
fi

port="${PGPORT_START:-55432}"
while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do  # something listens: try the next
    port=$((port + 1))
done

dir="$(mktemp -d /tmp/loopnest-pg.XXXXXX)" || fail "mktemp failed"
chown postgres "$dir" || fail "cannot chown $dir to postgres"
if ! as_postgres "'$initdb_bin' -D '$dir/data' -A trust -U postgres >'$dir/initdb.log' 2>&1 \
        && '$pg_ctl_bin' -D '$dir/data' -o '-p $port -k $dir -c listen_addresses=127.0.0.1' \
           -l '$dir/log' -w start" >&2; then
    cat "$dir/initdb.log" "$dir/log" >&2 2>/dev/null || true
    fail "PostgreSQL failed to start (logs above, kept in $dir)"
fi

echo "export LOOPNEST_TEST_PG_DIR=$dir"
echo "export LOOPNEST_TEST_PG_URL=postgresql+psycopg://postgres@127.0.0.1:$port/postgres"
