#!/usr/bin/env python3
"""What a command flood costs a job (README, "Watching a job"): starts `megaflux run
--headless --serve` on loopback (no token, so commands are allowed) with 8192 bins, then 40
clients each send 32 `move_bins` commands of 7,000 bins (as lists of numbers, the costliest
form) and never read; prints the job's resident memory before and at its peak.

    python3 .ci/flood.py target/release/megaflux 6650 [--no-commands]

With --no-commands the clients only connect and never read (what 40 stalled viewers cost).
"""
import json, socket, struct, subprocess, sys, threading, time
binary, port = sys.argv[1], int(sys.argv[2])
commands = 0 if "--no-commands" in sys.argv else 32
job = subprocess.Popen([binary, "run", "--headless", "--serve", f"127.0.0.1:{port}", "--bins", "8192",
                        "--duration", "40", "--keys", "1000000", "--rate", "200000"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
def rss():
    with open(f"/proc/{job.pid}/status") as f:
        for l in f:
            if l.startswith("VmRSS:"):
                return int(l.split()[1]) * 1024
time.sleep(8)
before = rss()
peak = [before]
stop = False
def sample():
    while not stop:
        try: peak[0] = max(peak[0], rss())
        except Exception: return
        time.sleep(0.02)
t = threading.Thread(target=sample); t.start()
def frame(obj):
    b = json.dumps(obj).encode()
    return struct.pack(">I", len(b)) + b
bins = list(range(7000))
conns = []
for c in range(40):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(frame({"type": "hello", "protocol": 2, "role": "subscriber"}))
    s.settimeout(0.05)
    for r in range(commands):
        try:
            s.sendall(frame({"type": "command", "request": r, "command": {"command": "move_bins", "bins": bins, "worker": 1, "standby": False}}))
        except Exception:
            break
    conns.append(s)
time.sleep(15)
stop = True; t.join()
print(f"before {before/2**20:.1f} MiB, peak {peak[0]/2**20:.1f} MiB, grown {(peak[0]-before)/2**20:.1f} MiB")
for s in conns: s.close()
job.communicate()
print("job exit status", job.returncode)
