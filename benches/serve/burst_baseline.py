#!/usr/bin/env python3
"""N copies of a command started at once, as the baseline of the
100-client burst (burst.sh): each copy's latency from the burst's start
to its reaping, the p99 and the span of the whole burst, over several
bursts.

Usage: benches/serve/burst_baseline.py [--clients N] [--bursts N] LABEL=COMMAND...

  benches/serve/burst_baseline.py --clients 100 \\
      bare="/bin/true" \\
      bwrap="bwrap --unshare-all --ro-bind / / /bin/true"

Each command is split on blanks (no shell) and started with posix_spawn,
its output sent to /dev/null (and `N<FILE` read as in
benches/startup/interleaved.py, whose parsing this uses). All N are spawned first, then reaped, so
the spawning itself is part of the burst, as a server's accepting is.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "startup"))
from interleaved import file_actions, parse_commands  # noqa: E402


def burst(argv, inputs, clients, devnull):
    actions = file_actions(inputs, devnull)
    start = time.perf_counter()
    pids = [os.posix_spawn(argv[0], argv, os.environ, file_actions=actions)
            for _ in range(clients)]
    latencies, failed = [], 0
    for _ in pids:
        _, status = os.wait()
        latencies.append((time.perf_counter() - start) * 1000.0)
        if status != 0:
            failed += 1
    return sorted(latencies), failed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--bursts", type=int, default=3)
    parser.add_argument("commands", nargs="+", metavar="LABEL=COMMAND")
    args = parser.parse_args()
    commands = parse_commands(args.commands)
    devnull = os.open(os.devnull, os.O_WRONLY)
    any_failed = False
    for b in range(args.bursts):
        for label, argv, inputs in commands:
            latencies, failed = burst(argv, inputs, args.clients, devnull)
            any_failed |= failed > 0
            p50 = latencies[len(latencies) // 2]
            p99 = latencies[min(len(latencies) - 1, (len(latencies) * 99) // 100)]
            print(f"burst {b + 1}: {label}: {args.clients} at once: p50 {p50:.1f} ms, "
                  f"p99 {p99:.1f} ms, span {latencies[-1]:.1f} ms, "
                  f"{args.clients / latencies[-1] * 1000.0:.0f}/s, {failed} failed")
            time.sleep(1)
    if any_failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
