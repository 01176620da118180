#!/usr/bin/env bash
# Throwaway services for the end-to-end tests of the PostgreSQL sink (and, later, the Kafka
# source): `services.sh start DIR` starts them on free loopback ports under DIR and prints
# shell lines to evaluate (`MEGAFLUX_PG_URL=...`); `services.sh stop DIR` stops them and
# leaves DIR to its owner. Needs Debian's postgresql-15 (initdb and pg_ctl refuse root:
# they run as the `postgres` user, so DIR must be one that user can reach, under /tmp say).
# The Kafka-protocol broker (MEGAFLUX_KAFKA) comes with the Kafka source (issue 52).
set -euo pipefail

usage() {
  echo "usage: services.sh start DIR | stop DIR" >&2
  exit 2
}

[ $# -eq 2 ] || usage
cmd=$1
dir=$2

pg_bin() {
  local bin
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    echo "services.sh: PostgreSQL's initdb not found (apt-get install postgresql)" >&2
    exit 1
  fi
  echo "$bin"
}

# A free loopback port: one the kernel gives a listener, released at once.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

as_postgres() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

start() {
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  local bin port
  bin=$(pg_bin)
  port=$(free_port)
  mkdir -p "$dir/pg"
  [ "$(id -u)" -eq 0 ] && chown postgres: "$dir/pg"
  as_postgres "$bin/initdb" -D "$dir/pg/data" -U postgres -A trust -E UTF8 -N >"$dir/pg/initdb.log" 2>&1 || {
    echo "services.sh: initdb failed; see $dir/pg/initdb.log" >&2
    exit 1
  }
  as_postgres "$bin/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/log" -w -t 30 \
    -o "-p $port -k $dir/pg -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null || {
    echo "services.sh: PostgreSQL did not start; see $dir/pg/log" >&2
    exit 1
  }
  echo "MEGAFLUX_PG_URL=postgresql://postgres@127.0.0.1:$port/postgres"
}

stop() {
  local bin
  bin=$(pg_bin)
  if [ -d "$dir/pg/data" ]; then
    as_postgres "$bin/pg_ctl" -D "$dir/pg/data" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
  fi
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
