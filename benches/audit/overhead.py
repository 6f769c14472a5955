#!/usr/bin/env python3
"""What auditing adds to one `cordon run -- /bin/true`.

Runs `cordon run --no-audit -- /bin/true` and `cordon run --audit DB --
/bin/true` alternately (so drift in the machine's speed hits both alike),
after a warm-up, and prints the medians, the difference and the ratio.
The store lives on the same disk as a real one would (DIR, default: a fresh
directory under $TMPDIR), so the durable commit is included.

    benches/audit/overhead.py [RUNS] [DIR]      (RUNS default 300)

Builds the release binary first (cargo build --release -p cordon).
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    workdir = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="cordon-audit-overhead.")
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "cordon"], cwd=ROOT, check=True)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    cordon = os.path.join(target, "release", "cordon")
    db = os.path.join(workdir, "audit.db")
    commands = {
        "no audit": [cordon, "run", "--no-audit", "--", "/bin/true"],
        "audit": [cordon, "run", "--audit", db, "--", "/bin/true"],
    }
    times = {name: [] for name in commands}
    for i in range(runs + 20):
        for name, argv in commands.items():
            start = time.perf_counter()
            done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            elapsed = (time.perf_counter() - start) * 1000
            if done.returncode != 0:
                print(f"{name}: exit {done.returncode}: {done.stderr.decode()}", file=sys.stderr)
                return 1
            if i >= 20:
                times[name].append(elapsed)
    fs = subprocess.run(["df", "--output=fstype", workdir], capture_output=True, text=True).stdout.split()[-1]
    base = statistics.median(times["no audit"])
    audited = statistics.median(times["audit"])
    print(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {os.cpu_count()} cores, "
          f"{os.uname().release}, store on {fs}, {runs} runs each, interleaved")
    print("| command | median | mean | p90 |")
    print("|---|---:|---:|---:|")
    for name, argv in commands.items():
        t = sorted(times[name])
        shown = " ".join(os.path.basename(a) if a == cordon else a for a in argv).replace(db, "DB")
        print(f"| `{shown}` | {statistics.median(t):.2f} ms | {statistics.mean(t):.2f} ms | "
              f"{t[int(len(t) * 0.9)]:.2f} ms |")
    print(f"\naudit adds {audited - base:+.2f} ms to the median run: "
          f"{(audited / base - 1) * 100:+.1f}% (target: under +10%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
