#!/usr/bin/env python3
"""Runs megaflux and the Megaphone reference side by side, in one sitting, and prints the
README's table.

hashcount against the reference's `word_count --backend hashmap|hashmapnative`: the same
keys, the same offered load (the reference's --rate is per worker), 2 workers, 256 bins.
Each round runs, back to back, both systems' all-at-once run (half the bins to one worker
at 1/3 of the run, back at 2/3), their fluid run (the same first move, back one bin per
step) and their native twin. Latency is per record from its due time in both systems;
"steady" is the median over the 250 ms windows away from the migrations, "max during" the
largest window max in the 1.5 s after a migration starts.

    tui/scripts/side-by-side.py --reference ../shared/reference --rounds 2

With `--processes 2` both systems run as two processes of one worker each on loopback
(timely's `-n 2 -p P -h hosts`), so that every move crosses between processes; the
latencies and peak RSS are process 0's.

Each `--variant` (megaflux flags, e.g. "--epochs fixed") is a column of its own; the
default is megaflux's defaults (adaptive epochs for hashcount) and `--epochs fixed`.

Only the standard library: it reads megaflux's summary (JSON on stdout) and the
reference's tab-separated lines (`summary_timeline`, `control_time`, `migration_done`,
`statm_RSS`). Every command it runs is printed to stderr before it runs.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# A window starting within this long after a migration starts counts as "during" it.
DURING_S = 1.5
# Windows this close to a migration's start (before it), or to the run's start, are not
# steady (the run warms up; a migration's effect starts slightly before its windows).
SETTLE_S = 1.0
WORKERS = 2


# Loopback ports for clusters (`--processes`): each run takes the next few.
PORTS = iter(range(24100, 60000, 10))


def run(cmd, processes=1):
    """Runs `cmd`, or with `processes` > 1 that many processes of it as one timely cluster on
    loopback (`cmd` then takes `-n`, `-p` and `-h` after its own `--`); process 0's output."""
    if processes == 1:
        cmds = [cmd]
    else:
        base = next(PORTS)
        hosts = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"side-by-side-hosts-{base}.txt")
        with open(hosts, "w") as f:
            f.write("".join(f"127.0.0.1:{base + p}\n" for p in range(processes)))
        cmds = [[*cmd, "-n", str(processes), "-p", str(p), "-h", hosts] for p in range(processes)]
    for c in cmds:
        print("+ " + " ".join(c), file=sys.stderr, flush=True)
    running = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in cmds]
    outs = [r.communicate() for r in running]
    for c, r, (_, err) in zip(cmds, running, outs):
        if r.returncode != 0:
            sys.exit(f"side-by-side: {c[0]} exited with {r.returncode}:\n{err[-2000:]}")
    return outs[0][0]


class Run:
    """One run's latency windows (start s, p50, p99, max in ns), migration windows
    (start s, end s) and peak RSS in bytes."""

    def __init__(self, windows, migrations, rss_peak, duration):
        self.windows = windows
        self.migrations = migrations
        self.rss_peak = rss_peak
        self.duration = duration

    def steady(self, field):
        starts = [m[0] for m in self.migrations]
        keep = []
        for w in self.windows:
            t = w["t"]
            if t < SETTLE_S:
                continue
            if any(s - 0.5 <= t < s + DURING_S for s in starts):
                continue
            keep.append(w[field])
        return statistics.median(keep) if keep else None

    def max_during(self, start):
        return max((w["max"] for w in self.windows if start <= w["t"] < start + DURING_S), default=None)


def megaflux(binary, args, duration, processes):
    if processes > 1:
        args = [*args, "--coordinator-port", str(next(PORTS)), "--"]
    out = run([binary, "run", "--headless", *args], processes)
    try:
        summary = json.loads(out[out.index("{") : out.rindex("}") + 1])
    except ValueError:
        sys.exit(f"side-by-side: megaflux {' '.join(args)} printed no summary:\n{out[-2000:]}")
    windows = [{"t": w["t_s"], "p50": w["p50"], "p99": w["p99"], "max": w["max"]} for w in summary["timeline"]]
    migrations = [(m["issued_s"], m.get("completed_s") or duration) for m in summary["migrations"]]
    return Run(windows, migrations, summary.get("rss_peak_bytes"), duration)


def reference(binary, args, duration, phases, processes):
    """`phases`: when each migration starts, in seconds (a fluid one is many steps)."""
    out = run([binary, *args], processes)
    windows, controls, done, rss = [], [], [], []
    for line in out.splitlines():
        f = line.split("\t")
        if f[0] == "summary_timeline":
            windows.append({"t": int(f[1]) / 1e9, "p50": int(f[3]), "p99": int(f[6]), "max": int(f[8])})
        elif f[0] == "control_time":
            controls.append(int(f[1]) / 1e9)
        elif f[0] == "migration_done":
            done.append(int(f[1]) / 1e9)
        elif f[0] == "statm_RSS":
            rss.append(int(f[2]))
    # A migration runs from its first control to its last step done before the next one.
    migrations = []
    for i, at in enumerate(phases):
        nxt = phases[i + 1] if i + 1 < len(phases) else float("inf")
        starts = [c for c in controls if at - 0.5 <= c < nxt]
        if starts:
            ends = [e for e in done if starts[0] <= e < nxt]
            migrations.append((starts[0], max(ends) if ends else duration))
    return Run(windows, migrations, max(rss) if rss else None, duration)


def ms(ns):
    return "–" if ns is None else (f"{ns / 1e6:.1f} ms" if ns >= 1e6 else f"{ns / 1e3:.0f} µs")


def spike(r, i):
    if i >= len(r.migrations):
        return "–"
    start, end = r.migrations[i]
    took = end - start
    return f"{ms(r.max_during(start))} {took * 1e3:.1f} ms" if took < 0.1 else f"{ms(r.max_during(start))} {took:.2f} s"


def one_round(a):
    """Each system's all-at-once, fluid and native run, back to back: the reference's, then
    each megaflux variant's."""
    d = a.duration
    there, back = d // 3, 2 * d // 3
    ref_bin = os.path.join(a.reference, "word_count")

    per_process = WORKERS // a.processes

    def ref(backend, migration, phases):
        args = ["--backend", backend, "--domain", str(a.keys), "--rate", str(a.rate // WORKERS),
                "--duration", str(d), "--migration", migration, "--", f"-w{per_process}"]
        return reference(ref_bin, args, d, phases, a.processes)

    def mf(flags, second):
        args = ["--workload", "hashcount", "--keys", str(a.keys), "--rate", str(a.rate), "--duration", str(d),
                "--workers", str(per_process), *flags]
        if second:
            args += ["--migrate", f"all-at-once@{there}:pack:1", "--migrate", f"{second}@{back}:uniform"]
        else:
            args += ["--native"]
        return megaflux(a.megaflux, args, d, a.processes)

    r = {"reference": {
        "sudden": ref("hashmap", "sudden", [there, back]),
        "fluid": ref("hashmap", "fluid", [there, back]),
        "native": ref("hashmapnative", "none", []),
    }}
    for v in a.variant:
        flags = v.split()
        r[" ".join(["megaflux", *flags])] = {
            "sudden": mf(flags, "all-at-once"),
            "fluid": mf(flags, "fluid"),
            "native": mf(flags, None),
        }
    return r


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reference", default=os.path.join(ROOT, "..", "shared", "reference"),
                   help="directory holding the reference's word_count binary")
    p.add_argument("--megaflux", default=os.path.join(ROOT, "target", "release", "megaflux"),
                   help="the megaflux binary (build it with cargo build --release first)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--processes", type=int, default=1, choices=[1, 2],
                   help="run each system as this many processes on loopback (the workers split between them)")
    p.add_argument("--keys", type=int, default=16_000_000)
    p.add_argument("--rate", type=int, default=400_000, help="records/s over both workers")
    p.add_argument("--duration", type=int, default=21, help="seconds, a multiple of 3")
    p.add_argument("--variant", action="append",
                   help="megaflux flags to run as a column of their own (repeatable; default: "
                        "the defaults, and --epochs fixed)")
    p.add_argument("--json", help="also write every run's figures here")
    p.add_argument("--from-json", help="run nothing: print the table of figures an earlier --json wrote")
    a = p.parse_args()
    a.variant = a.variant or ["", "--epochs fixed"]
    if a.from_json:
        # The table of an earlier sitting, from the figures it wrote with --json.
        with open(a.from_json) as f:
            saved = json.load(f)
        settings = saved["settings"]
        rounds = [{n: {k: Run(**v) for k, v in runs.items()} for n, runs in r.items()} for r in saved["rounds"]]
    else:
        for b in (os.path.join(a.reference, "word_count"), a.megaflux):
            if not os.access(b, os.X_OK):
                sys.exit(f"side-by-side: {b} is not an executable file")
        if a.duration % 3 or a.rounds < 1:
            sys.exit("side-by-side: --duration must be a multiple of 3 and --rounds at least 1")
        settings = {"keys": a.keys, "rate": a.rate, "duration": a.duration, "processes": a.processes}
        rounds = [one_round(a) for _ in range(a.rounds)]
    names = list(rounds[0])

    def steady(run):
        return f"{ms(run.steady('p50'))} / {ms(run.steady('p99'))}"

    rows = [
        ("all-at-once there: max during, duration", lambda s: spike(s["sudden"], 0)),
        ("all-at-once back: max during, duration", lambda s: spike(s["sudden"], 1)),
        ("fluid back (one bin a step): max during, duration", lambda s: spike(s["fluid"], 1)),
        ("steady p50 / p99, all-at-once run", lambda s: steady(s["sudden"])),
        ("steady p50 / p99, fluid run", lambda s: steady(s["fluid"])),
        ("steady p50 / p99, native", lambda s: steady(s["native"])),
        ("peak RSS, all-at-once run",
         lambda s: "–" if s["sudden"].rss_peak is None else f"{s['sudden'].rss_peak / 1e9:.2f} GB"),
    ]
    processes = settings.get("processes", 1)
    where = f" in {processes} processes" if processes > 1 else ""
    print(f"hashcount, {settings['keys']} keys, {settings['rate']} records/s, {WORKERS} workers{where}, "
          f"{settings['duration']} s ({len(rounds)} round{'s' if len(rounds) > 1 else ''}, one value per round)\n")
    print("| | " + " | ".join(f"`{n}`" if n != "reference" else n for n in names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for label, row in rows:
        print(f"| {label} | " + " | ".join(", ".join(row(r[n]) for r in rounds) for n in names) + " |")
    if a.json:
        with open(a.json, "w") as f:
            runs = [{n: {k: vars(v) for k, v in rs.items()} for n, rs in r.items()} for r in rounds]
            json.dump({"settings": settings, "rounds": runs}, f)


if __name__ == "__main__":
    main()
