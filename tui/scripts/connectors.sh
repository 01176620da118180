#!/usr/bin/env bash
# What the Kafka source and the PostgreSQL sink cost, against the file source and the file
# sink, in one sitting: the README's page views job (tui/examples/pageviews.rs) reads the
# same VIEWS views from a file or from a 4-partition topic, offered faster than it can take
# them (--rate 5000000: the reader sets the pace),
# and writes its outputs (one per view) to a file or to a table. Prints records per second
# for each pair; release builds, throwaway services (services.sh), all on this machine.
#
#   tui/scripts/connectors.sh [VIEWS]     (default 2000000)
set -euo pipefail
cd "$(dirname "$0")/../.."
views=${1:-2000000}
dir=$(mktemp -d /tmp/megaflux-connectors.XXXXXX)
chmod 755 "$dir"
cleanup() { bash tui/scripts/services.sh stop "$dir/services" >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap cleanup EXIT

cargo build --release -q -p megaflux-tui --example pageviews --example to_kafka
bin=target/release/examples
eval "$(bash tui/scripts/services.sh start "$dir/services")"

python3 - "$views" >"$dir/views.csv" <<'PY'
import random, sys
r = random.Random(42)
n = int(sys.argv[1])
print("\n".join(f"u{int(r.paretovariate(1.2)) % 300000},/page/{r.randrange(40)},{i}" for i in range(n)))
PY
timeout 600 "$bin/to_kafka" "$MEGAFLUX_KAFKA" views 4 <"$dir/views.csv"

run() { # NAME INPUT OUTPUT
  local started ended
  started=$(date +%s.%N)
  timeout 900 "$bin/pageviews" run --headless --rate 5000000 --workers 2 --input "$2" --output "$3" --force \
    --summary "$dir/$1.json" >/dev/null 2>"$dir/$1.err" || { cat "$dir/$1.err" >&2; exit 1; }
  ended=$(date +%s.%N)
  python3 - "$1" "$dir/$1.json" "$started" "$ended" <<'PY'
import json, sys
name, path, t0, t1 = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
s = json.load(open(path))
secs = t1 - t0
print(f"{name:<16} {s['records_in']:>9} records  {s['outputs']:>9} outputs  {secs:6.1f} s wall  {s['records_in'] / secs:>10,.0f} records/s")
PY
}

topic="kafka://$MEGAFLUX_KAFKA/views?end=now"
table="$MEGAFLUX_PG_URL?table=views_out"
echo "pageviews, $views views, 2 workers, --rate 5000000; wall time includes start and end"
run file-file "$dir/views.csv" "$dir/out.jsonl"
run kafka-file "$topic" "$dir/out.jsonl"
run file-postgres "$dir/views.csv" "$table"
run kafka-postgres "$topic" "$table"
