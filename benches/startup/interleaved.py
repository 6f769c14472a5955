#!/usr/bin/env python3
"""Commands timed in alternation: one run of each in turn (the order
reversed every other round), so that a machine whose speed drifts over
minutes, as these VMs do, moves every command alike. hyperfine (used by
compare.sh) runs all of one command's runs before the next command's.

Usage: benches/startup/interleaved.py [--runs N] [--warmup N] LABEL=COMMAND...

  benches/startup/interleaved.py --runs 300 \\
      before="/tmp/before/cordon run --no-audit -- /bin/true" \\
      after="target/release/cordon run --no-audit -- /bin/true" \\
      bwrap="bwrap --unshare-all --ro-bind / / /bin/true"

Each command is split on blanks (no shell) and started with posix_spawn,
its output sent to /dev/null; the time is from the spawn to the reaping.
A word `N<FILE` is no argument: FILE is opened for reading on descriptor
N of that command, anew for each run (`bwrap --seccomp 3 ... 3<FILE`).

Compare binaries as fresh copies (`cp`) made just before: a binary that
had uprobes placed on it (perf probe, tracefs) was seen to stay 0.5-0.65
ms slower per run than a fresh copy of the same file, after the probes
were removed (BENCHMARKS.md).
"""
import argparse
import os
import re
import shutil
import statistics
import sys
import time

# `N<FILE`: FILE on descriptor N.
INPUT = re.compile(r"^[0-9]+<.+$")


def parse_commands(items):
    """`LABEL=COMMAND` arguments as (label, argv with the program's full
    path, [(descriptor, file)]); exits with the reason on a bad one."""
    commands = []
    for item in items:
        label, sep, command = item.partition("=")
        words = command.split()
        inputs = [(int(w.split("<", 1)[0]), w.split("<", 1)[1]) for w in words if INPUT.match(w)]
        argv = [w for w in words if not INPUT.match(w)]
        if not sep or not argv:
            sys.exit(f"not LABEL=COMMAND: {item!r}")
        program = shutil.which(argv[0])
        if program is None:
            sys.exit(f"{label}: no such program: {argv[0]}")
        commands.append((label, [program] + argv[1:], inputs))
    return commands


def file_actions(inputs, devnull):
    """posix_spawn's actions: output to `devnull`, each input file opened."""
    return [
        (os.POSIX_SPAWN_DUP2, devnull, 1),
        (os.POSIX_SPAWN_DUP2, devnull, 2),
    ] + [(os.POSIX_SPAWN_OPEN, fd, path, os.O_RDONLY, 0) for fd, path in inputs]


def spawn_and_wait(argv, inputs, devnull):
    actions = file_actions(inputs, devnull)
    start = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=actions)
    _, status = os.waitpid(pid, 0)
    return (time.perf_counter() - start) * 1000.0, status


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("commands", nargs="+", metavar="LABEL=COMMAND")
    args = parser.parse_args()
    commands = parse_commands(args.commands)
    devnull = os.open(os.devnull, os.O_WRONLY)
    times = {label: [] for label, _, _ in commands}
    failed = {label: 0 for label, _, _ in commands}
    for i in range(args.warmup + args.runs):
        order = commands if i % 2 == 0 else commands[::-1]
        for label, argv, inputs in order:
            ms, status = spawn_and_wait(argv, inputs, devnull)
            if i < args.warmup:
                continue
            if status != 0:
                failed[label] += 1
            times[label].append(ms)
    print(f"{args.runs} runs of each, alternating; ms")
    print(f"{'':16} {'median':>8} {'p25':>8} {'p75':>8}  failed")
    for label, _, _ in commands:
        v = sorted(times[label])
        print(f"{label:16} {statistics.median(v):8.3f} {v[len(v) // 4]:8.3f} "
              f"{v[3 * len(v) // 4]:8.3f}  {failed[label]}")
    if any(failed.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
