#!/usr/bin/env python3
"""What each feature costs on the hot path when present but unused.

Builds benches/feature_costs.rs once as it is and once without each feature
(`--cfg tend_without="..."`, each in its own target directory under
target/feature-costs), counts each build's instructions on the runtime's
thread under callgrind (one thread, so the count repeats to 0.01 %), and
prints the table of docs/performance.md: each feature's cost as the share of
the instructions it adds to the initial sync and to the latency path.
Read-your-writes is compared with itself turned off (`TEND_RYW=off`), which
the builder offers. Wall times are printed beside, medians of alternated
runs; on a shared machine they move more than 2 % between runs.

    python3 benches/feature_costs.py [--rounds N]

Needs valgrind. Takes about 20 minutes on 2 cores.
"""

import argparse
import glob
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIGURES = ("sync", "latency")
# (row, build without, environment)
ROWS = (
    ("spans with no subscriber", "spans", {}),
    ("last states with no deletes", "last_states", {}),
    ("trigger reasons", "triggers", {}),
    ("the shard filter, unsharded", "shard_filter", {}),
    ("read-your-writes with no writes", None, {"TEND_RYW": "off"}),
    # The same build against itself: what the figures move by alone.
    ("nothing (control: the same build twice)", None, {}),
)


def build(without):
    """The bench's executable built without `without` (None: as it is)."""
    name = without or "all"
    env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(ROOT, "target", "feature-costs", name))
    env["RUSTFLAGS"] = f'--cfg tend_without="{without}"' if without else ""
    out = subprocess.run(
        ["cargo", "bench", "--bench", "feature_costs", "--no-default-features",
         "--no-run", "--message-format=json"],
        cwd=ROOT, env=env, check=True, stdout=subprocess.PIPE, text=True,
    ).stdout
    for line in out.splitlines():
        message = json.loads(line)
        if message.get("executable") and message["target"]["name"] == "feature_costs":
            return message["executable"]
    sys.exit(f"no feature_costs executable built without {name}")


def instructions(executable, figure, extra, runs):
    """Instructions on the runtime's thread, median of `runs` runs."""
    return statistics.median(counted(executable, figure, extra) for _ in range(runs))


def counted(executable, figure, extra):
    """Instructions on the runtime's thread (every thread but the main one):
    the same to 0.01 % run to run, but now and then a worker's batch ends
    at another key (the pacing reads the clock), a few % apart."""
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, TEND_BENCH=figure, **extra)
        subprocess.run(
            ["valgrind", "--tool=callgrind", "--separate-threads=yes",
             f"--callgrind-out-file={out}/cg", executable],
            env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        total = 0
        for path in glob.glob(f"{out}/cg-*"):
            if path.endswith("-01"):
                continue
            with open(path) as f:
                total += next(int(l.split()[1]) for l in f if l.startswith("summary:"))
        return total


def wall(executable, figure, extra):
    """Microseconds per object or change, as the bench prints them."""
    env = dict(os.environ, TEND_BENCH=figure, **extra)
    out = subprocess.run([executable], env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    return float(out.split(",")[-1].split()[0])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11, help="alternated wall-time runs")
    parser.add_argument("--counts", type=int, default=3, help="callgrind runs per figure")
    args = parser.parse_args()
    builds = {without: build(without) for without in [None] + [r[1] for r in ROWS if r[1]]}
    # With the feature absent: its build, or the base with it off.
    runs = [("all", builds[None], {})]
    runs += [(row, builds[without] if without else builds[None], extra) for row, without, extra in ROWS]
    counts = {name: {f: instructions(exe, f, extra, args.counts) for f in FIGURES} for name, exe, extra in runs}
    walls = {name: {f: [] for f in FIGURES} for name, _, _ in runs}
    order = random.Random(27)
    for _ in range(args.rounds):
        # Each round in another order: a run's place in it moves its time.
        shuffled = runs[:]
        order.shuffle(shuffled)
        for name, exe, extra in shuffled:
            for f in FIGURES:
                walls[name][f].append(wall(exe, f, extra))
    base = counts["all"]
    print("| feature, present but unused | sync: instructions added | latency path: instructions added | wall time, sync / latency (median of alternated runs) |")
    print("|---|---|---|---|")
    for row, _, _ in ROWS:
        cells = []
        for f in FIGURES:
            added = base[f] - counts[row][f]
            cells.append(f"{100 * added / counts[row][f]:+.2f} %")
        ratio = [statistics.median(walls["all"][f]) / statistics.median(walls[row][f]) - 1 for f in FIGURES]
        print(f"| {row} | {cells[0]} | {cells[1]} | {100 * ratio[0]:+.1f} % / {100 * ratio[1]:+.1f} % |")
    print(f"\nall present: {base['sync']:,.0f} instructions for the sync, {base['latency']:,.0f} for the"
          f" latency path; medians {statistics.median(walls['all']['sync']):.2f} µs per object,"
          f" {statistics.median(walls['all']['latency']):.2f} µs per change")

if __name__ == "__main__":
    main()
