#!/usr/bin/env bash
# What serving metrics costs a run: p50 at a rate the job keeps up with (keycount, 400,000
# records/s), and the records per second it takes when offered more than it can (keycount
# offered 50,000,000 records/s: records in over the run's wall time, its start and the backlog's
# drain included). Three variants, alternated in
# each round so that the machine's noise falls on all of them alike:
#   off      no probe at all (nothing observes the job)
#   probe    the probe on, recording a trace (what a dashboard or --record costs)
#   metrics  the probe on, recording, and --metrics scraped once a second by curl
# The last two differ only by the serving of metrics.
#
#   tui/scripts/metrics-overhead.sh [ROUNDS] [SECS]     (release build; default 3 rounds, 20 s)
#   VARIANTS="probe metrics" tui/scripts/metrics-overhead.sh 5 20   (only those variants)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
secs=${2:-20}
bin=target/release/megaflux
[ -x "$bin" ] || { echo "build it first: cargo build --release -p megaflux-tui" >&2; exit 2; }
command -v curl >/dev/null || { echo "needs curl" >&2; exit 2; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# One run of variant $1 at rate $2; prints "p50_ms records_per_wall_second".
one() {
  local variant=$1 rate=$2 extra=() scraper=
  case $variant in
    probe) extra=(--record "$dir/trace.jsonl" --force) ;;
    metrics) extra=(--record "$dir/trace.jsonl" --force --metrics 127.0.0.1:0) ;;
  esac
  local started ended
  started=$(date +%s.%N)
  timeout $((secs * 4 + 120)) "$bin" run --headless --workload keycount --rate "$rate" \
    --duration "$secs" --summary "$dir/summary.json" "${extra[@]}" \
    > /dev/null 2> "$dir/stderr" &
  local job=$!
  if [ "$variant" = metrics ]; then
    local addr=
    for _ in $(seq 1 600); do
      addr=$(grep -o 'http://[^ ]*/metrics' "$dir/stderr" || true)
      [ -n "$addr" ] && break
      sleep 0.1
    done
    (while kill -0 "$job" 2>/dev/null; do curl -s -m 5 -o /dev/null "$addr" || true; sleep 1; done) &
    scraper=$!
  fi
  wait "$job" || { echo "run failed: $(cat "$dir/stderr")" >&2; exit 1; }
  ended=$(date +%s.%N)
  [ -n "$scraper" ] && { kill "$scraper" 2>/dev/null || true; wait "$scraper" 2>/dev/null || true; }
  python3 -c "
import json; s = json.load(open('$dir/summary.json'))
print('%.3f %.0f' % (s['latency_ns']['p50'] / 1e6, s['records_in'] / ($ended - $started)))"
}

echo "variant  p50_ms@400k  records/s@offered-50M   (round by round)"
declare -A p50 rate
variants=${VARIANTS:-off probe metrics}
for r in $(seq 1 "$rounds"); do
  for v in $variants; do
    read -r p _ < <(one "$v" 400000)
    read -r _ a < <(one "$v" 50000000)
    p50[$v]="${p50[$v]:-} $p"
    rate[$v]="${rate[$v]:-} $a"
    echo "round $r $v: p50 $p ms, $a records/s"
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo
for v in $variants; do
  echo "$v: median p50 $(echo "${p50[$v]}" | median) ms, median throughput $(echo "${rate[$v]}" | median) records/s"
done
