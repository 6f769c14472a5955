#!/usr/bin/env python3
"""Staged workspaces: what `--stage` adds to a run, and listing and
promoting a change set of 1,000 files.

    benches/stage/bench.py [RUNS] [FILES]     (RUNS default 300, FILES 1000)

1. Overhead: `cordon run --no-audit --stage REPO -- /bin/true` against the
   same run with REPO bound read-only (`--ro REPO`), alternately (so drift
   in the machine's speed hits both alike), after 20 warm-up pairs. REPO
   holds FILES files. Target: the difference of the medians <= 1 ms.
2. Listing: a staged run rewrites FILES files; then `cordon changes ID`
   (the change set kept at the run's end) and the same after deleting the
   kept change set (so it is decoded from the upper layer and hashed
   again), RUNS/10 times each. Target: <= 50 ms.
3. Promotion: `cordon promote ID` of those FILES modified files, each time
   after a fresh staged run, RUNS/30 times. Target: <= 1 s.

The repository and the state directory are fresh directories under
$TMPDIR. Builds the release binary first.
"""

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


CPU = {}


def timed(argv, env, check=True, cpu_key=None):
    """Wall time in ms; with `cpu_key`, the command's CPU time (user +
    system, its children included) is noted in CPU[cpu_key] too: on a
    loaded machine the wall time multiplies what the CPU time costs."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    elapsed = (time.perf_counter() - start) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cpu_key is not None:
        CPU.setdefault(cpu_key, []).append(
            ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1000
        )
    if check and done.returncode != 0:
        sys.exit(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.decode()}")
    return elapsed


def staged_run(cordon, repo, env, script):
    report = os.path.join(env["XDG_STATE_HOME"], "report.json")
    subprocess.run(
        [cordon, "run", "--no-audit", "--report", report, "--stage", repo, "--", "sh", "-c", script],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=repo,
    )
    with open(report) as f:
        return json.load(f)["stage"]["run_id"]


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    files = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "cordon"], cwd=ROOT, check=True)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    cordon = os.path.join(target, "release", "cordon")
    work = tempfile.mkdtemp(prefix="cordon-stage-bench.")
    repo = os.path.join(work, "repo")
    state = os.path.join(work, "state")
    os.makedirs(os.path.join(repo, "src"))
    os.makedirs(state)
    for i in range(files):
        with open(os.path.join(repo, "src", f"f{i:04}.txt"), "w") as f:
            f.write(f"line {i}\n" * 20)
    env = dict(os.environ, XDG_STATE_HOME=state)
    # Every command runs in an empty directory (the current directory is
    # bound into each sandbox: a big one would be measured too).
    empty = os.path.join(work, "cwd")
    os.makedirs(empty)
    os.chdir(empty)
    print(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {os.cpu_count()} cores, "
          f"{os.uname().release}, repo of {files} files on "
          f"{subprocess.run(['df', '--output=fstype', work], capture_output=True, text=True).stdout.split()[-1]}, "
          f"load {os.getloadavg()[0]:.2f}")

    # 1. Overhead of --stage on a run that writes nothing.
    time.sleep(0.05)
    commands = {
        "--ro REPO": [cordon, "run", "--no-audit", "--ro", repo, "--", "/bin/true"],
        "--stage REPO": [cordon, "run", "--no-audit", "--stage", repo, "--", "/bin/true"],
    }
    times = {name: [] for name in commands}
    for i in range(runs + 20):
        for name, argv in commands.items():
            t = timed(argv, env, cpu_key=name if i >= 20 else None)
            if i >= 20:
                times[name].append(t)
    base = statistics.median(times["--ro REPO"])
    staged = statistics.median(times["--stage REPO"])
    # Dot-entries are the store's own: the remembered overlay probe, and
    # stages set aside for the background reaper.
    left = [n for n in os.listdir(os.path.join(state, "cordon", "stage")) if not n.startswith(".")]
    print(f"overhead ({runs} pairs): --ro median {base:.2f} ms, --stage median {staged:.2f} ms, "
          f"added {staged - base:+.2f} ms (target <= 1 ms: {'met' if staged - base <= 1 else 'NOT met'}); "
          f"stages left: {len(left)}")
    cpu_base = statistics.median(CPU["--ro REPO"])
    cpu_staged = statistics.median(CPU["--stage REPO"])
    print(f"  CPU time (user + system, medians): --ro {cpu_base:.2f} ms, --stage {cpu_staged:.2f} ms, "
          f"added {cpu_staged - cpu_base:+.2f} ms")

    # 2. Listing a change set of FILES modified files.
    script = "for f in src/*.txt; do echo changed >> $f; done"
    run_id = staged_run(cordon, repo, env, script)
    kept = os.path.join(state, "cordon", "stage", run_id, "changes.json")
    n = max(runs // 10, 5)
    listing = [timed([cordon, "changes", run_id], env) for _ in range(n)]
    as_json = [timed([cordon, "changes", run_id, "--json"], env) for _ in range(n)]
    decoded = []
    for _ in range(n):
        os.remove(kept)
        decoded.append(timed([cordon, "changes", run_id], env))
    med = statistics.median(listing)
    print(f"changes of {files} files ({n} runs): listing median {med:.2f} ms "
          f"(target <= 50 ms: {'met' if med <= 50 else 'NOT met'}), --json {statistics.median(as_json):.2f} ms, "
          f"decoded from the upper layer and hashed {statistics.median(decoded):.2f} ms")
    subprocess.run([cordon, "discard", run_id], check=True, stderr=subprocess.DEVNULL, env=env)

    # 3. Promoting them.
    m = max(runs // 30, 5)
    promote = []
    for _ in range(m):
        # The previous promotion just wrote these files: a host file changed
        # within a clock tick before a run counts as changed during it.
        time.sleep(0.05)
        run_id = staged_run(cordon, repo, env, script)
        promote.append(timed([cordon, "promote", run_id, "--audit", os.path.join(state, "audit.db")], env))
    med = statistics.median(promote)
    print(f"promote {files} modified files ({m} runs): median {med:.1f} ms, max {max(promote):.1f} ms "
          f"(target <= 1000 ms: {'met' if med <= 1000 else 'NOT met'})")
    # The background reaper may still be deleting set-aside stages.
    store = os.path.join(state, "cordon", "stage")
    for _ in range(200):
        if not any(n.startswith(".reap-") for n in os.listdir(store)):
            break
        time.sleep(0.05)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
