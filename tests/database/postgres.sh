#!/usr/bin/env bash
# A PostgreSQL cluster of the tests' own, from Debian's packages, in a
# directory the caller names and later removes:
#   postgres.sh start DIR     initdb in DIR/data and start it, listening on a
#                             unix socket in DIR only (no TCP port); prints
#                             the variables the tests read:
#                               THROWBOX_TEST_PG_HOST=DIR
#                               THROWBOX_TEST_PG_USER=throwbox
#   postgres.sh stop DIR      stop it at once (what a crash looks like to a client)
#   postgres.sh restart DIR   stop it at once, then start it again
# The cluster runs as the user "postgres" (made by Debian's package) when
# started as root, since the server refuses to run as root; else as the
# caller. Authentication is trust, on a socket only its owner's directory
# reaches. fsync is off (the tests need no durability across a power cut;
# a crash of the server process loses nothing) unless THROWBOX_PG_FSYNC=on;
# THROWBOX_PG_OPTIONS adds server settings ("-c name=value ...").
# Exit 77 when PostgreSQL is not installed.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop|restart DIR" >&2; exit 2; }

bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
  echo "postgres.sh: PostgreSQL is not installed (apt-get install postgresql-15)" >&2
  exit 77
fi

as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"
  else
    "$@"
  fi
}

start() {
  as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses='' -c unix_socket_directories='$dir' -c max_connections=200 -c fsync=${THROWBOX_PG_FSYNC:-off} ${THROWBOX_PG_OPTIONS:-}" \
    start >/dev/null
}

stop() {
  [ -f "$dir/data/postmaster.pid" ] || return 0
  as_owner "$bindir/pg_ctl" -D "$dir/data" -m immediate -w -t 60 stop >/dev/null || true
}

case "$cmd" in
  start)
    mkdir -p "$dir"
    if [ "$(id -u)" -eq 0 ]; then
      id postgres >/dev/null 2>&1 || { echo "postgres.sh: no user postgres (Debian's postgresql package makes it)" >&2; exit 77; }
      chown postgres:postgres "$dir"
    fi
    chmod 0711 "$dir"
    as_owner "$bindir/initdb" -D "$dir/data" -U throwbox -A trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 ||
      { cat "$dir/initdb.log" >&2; exit 1; }
    start || { cat "$dir/server.log" >&2; exit 1; }
    echo "THROWBOX_TEST_PG_HOST=$dir"
    echo "THROWBOX_TEST_PG_USER=throwbox"
    ;;
  stop) stop ;;
  restart)
    stop
    start || { cat "$dir/server.log" >&2; exit 1; }
    ;;
  *) echo "usage: $0 start|stop|restart DIR" >&2; exit 2 ;;
esac
