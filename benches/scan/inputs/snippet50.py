"""Summarise a CSV file of measurements: count, mean and spread per group."""

import argparse
import csv
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def load(path):
    groups = defaultdict(list)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            try:
                groups[row["group"]].append(float(row["value"]))
            except (KeyError, ValueError):
                continue
    return groups


def summarise(values):
    mean = statistics.fmean(values)
    spread = statistics.pstdev(values) if len(values) > 1 else 0.0
    return {"n": len(values), "mean": round(mean, 4), "stdev": round(spread, 4),
            "min": min(values), "max": max(values), "cv": round(spread / mean, 4) if mean else math.nan}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("csv", type=Path)
    parser.add_argument("-o", "--output", type=Path, default=Path("out/summary.json"))
    args = parser.parse_args(argv)
    groups = load(args.csv)
    if not groups:
        print(f"no rows in {args.csv}", file=sys.stderr)
        return 1
    result = {name: summarise(vals) for name, vals in sorted(groups.items())}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2))
    for name, s in result.items():
        print(f"{name:20} n={s['n']:5} mean={s['mean']:10.4f} stdev={s['stdev']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

