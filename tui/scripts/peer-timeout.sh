#!/usr/bin/env bash
# How long a cluster takes to go on without a process that hangs (SIGSTOP) or crashes
# (SIGKILL): three loopback processes with --replicas 2; process 2 is stopped or killed 2 s
# after process 0 says `cluster formed`, and the time until process 0 says `cluster
# restarted` is printed. Usage: peer-timeout.sh BINARY STOP|KILL TIMEOUT_SECS...
# (e.g. `peer-timeout.sh target/debug/megaflux STOP 1 5`).
set -u
binary=$(realpath "$1"); signal=$2; shift 2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
export MEGAFLUX_CLUSTER_TOKEN="peer-timeout measurement's secret"
for timeout_s in "$@"; do
  base=$((25000 + RANDOM % 2000))
  printf '127.0.0.1:%d\n127.0.0.1:%d\n127.0.0.1:%d\n' "$base" $((base + 1)) $((base + 2)) > hosts
  pids=()
  for p in 0 1 2; do
    timeout 120 "$binary" run --headless --keys 20000 --rate 20000 --duration 12 --replicas 2 \
      --workers 1 --peer-timeout "$timeout_s" --coordinator-port $((base + 5)) --epoch-us 1000 \
      -- -n 3 -p "$p" -h hosts > "out$p" 2> "err$p" &
    pids+=($!)
  done
  # Each wait gives up after a minute, naming what it waited for.
  waited=0
  until grep -q "cluster formed" err0 2>/dev/null; do
    sleep 0.05; waited=$((waited + 1))
    if [ "$waited" -gt 1200 ]; then echo "no 'cluster formed' within 60 s:" >&2; cat err0 >&2; kill "${pids[@]}" 2>/dev/null; exit 1; fi
  done
  sleep 2
  victim=$(pgrep -f "^$binary run .* -p 2 -h hosts")
  t0=$(date +%s.%N)
  kill "-$signal" "$victim"
  waited=0
  until grep -q "cluster restarted" err0 || ! kill -0 "${pids[0]}" 2>/dev/null; do
    sleep 0.01; waited=$((waited + 1))
    if [ "$waited" -gt 6000 ]; then echo "no 'cluster restarted' within 60 s" >&2; break; fi
  done
  t1=$(date +%s.%N)
  kill -KILL "$victim" 2>/dev/null
  wait "${pids[0]}" "${pids[1]}" 2>/dev/null
  echo "--peer-timeout $timeout_s, SIG$signal: $(echo "$t1 - $t0" | bc) s to: $(grep -o 'cluster restarted.*' err0 || echo 'no restart')"
  wait 2>/dev/null
done
