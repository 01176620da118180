#!/usr/bin/env bash
# Throwaway services for the end-to-end tests of the PostgreSQL sink and the Kafka source:
# `services.sh start DIR [pg|kafka]` starts them (both unless one is named) on free loopback
# ports under DIR and prints shell lines to evaluate (`MEGAFLUX_PG_URL=...`,
# `MEGAFLUX_KAFKA=HOST:PORT`); `services.sh stop DIR` stops whatever it started there and
# leaves DIR to its owner.
# - PostgreSQL: Debian's postgresql (initdb and pg_ctl refuse root: they run as the
#   `postgres` user, so DIR must be one that user can reach, under /tmp say).
# - Kafka: tansu, a Kafka-protocol broker in Rust, with its in-memory storage (`$TANSU`, or
#   `tansu` on the PATH: cargo install tansu --version 0.6.0 --locked --no-default-features
#   --features dynostore).
set -euo pipefail

usage() {
  echo "usage: services.sh start DIR [pg|kafka] | stop DIR" >&2
  exit 2
}

[ $# -eq 2 ] || [ $# -eq 3 ] || usage
cmd=$1
dir=$2
which=${3:-all}
case "$which" in all|pg|kafka) ;; *) usage ;; esac

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

start_pg() {
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

tansu_bin() {
  local bin=${TANSU:-}
  [ -n "$bin" ] || bin=$(command -v tansu 2>/dev/null || true)
  [ -n "$bin" ] || [ ! -x "$HOME/.cargo/bin/tansu" ] || bin=$HOME/.cargo/bin/tansu
  if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "services.sh: tansu not found (set TANSU, or: cargo install tansu --version 0.6.0 --locked --no-default-features --features dynostore)" >&2
    exit 1
  fi
  echo "$bin"
}

start_kafka() {
  local bin port
  bin=$(tansu_bin)
  port=$(free_port)
  mkdir -p "$dir/kafka"
  # Its own session: a test's process group may be killed, the broker is stopped by `stop`.
  setsid "$bin" broker --listener-url "tcp://127.0.0.1:$port" \
    --advertised-listener-url "tcp://127.0.0.1:$port" \
    --storage-engine memory://tansu/ >"$dir/kafka/log" 2>&1 </dev/null &
  echo $! >"$dir/kafka/pid"
  local tries=0
  until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    tries=$((tries + 1))
    if [ "$tries" -gt 300 ] || ! kill -0 "$(cat "$dir/kafka/pid")" 2>/dev/null; then
      echo "services.sh: the Kafka broker did not start; see $dir/kafka/log" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "MEGAFLUX_KAFKA=127.0.0.1:$port"
}

start() {
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if [ "$which" != kafka ]; then start_pg; fi
  if [ "$which" != pg ]; then start_kafka; fi
}

stop() {
  if [ -d "$dir/pg/data" ]; then
    as_postgres "$(pg_bin)/pg_ctl" -D "$dir/pg/data" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
  fi
  if [ -f "$dir/kafka/pid" ]; then
    local pid
    pid=$(cat "$dir/kafka/pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/kafka/pid"
  fi
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
