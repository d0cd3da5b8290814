"""The threads delta-rs's runtime starts to open a table, and to write its checkpoint, as the
commits since its last checkpoint grow: why the tables binlake creates take a checkpoint every 10
commits (pipelines/lake/maintenance/layout.py).

    .venv/bin/python bench/delta_threads.py [--intervals 100,10] [--commits 60]

For each ``delta.checkpointInterval`` I, a local table gets C one-row appends after its creation
(fewer when I is smaller: the commits since its last checkpoint are then C mod I). Then, each
after 11 s without delta-rs work (its pool's idle threads end after 10 s): the table opened
afresh, and a checkpoint written through that handle. Printed per interval and step: the
process's threads before and right after (``/proc/self/task``). delta-rs reads the commits after
a checkpoint at once, each read on a thread of its blocking pool, and a stream's steady use of
the pool keeps such threads, with their stacks and allocator caches (bench/maintenance.py
--only rss). Figures go to bench/out/delta_threads.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out" / "delta_threads.json"
IDLE_SECONDS = 11.0  # tokio's blocking pool ends a thread idle for 10 s


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def measure(interval: int, commits: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="binlake-threads-") as d:
        write_deltalake(d, pa.table({"id": [0]}), configuration={"delta.checkpointInterval": str(interval)})
        writer = DeltaTable(d)
        for i in range(1, commits + 1):
            write_deltalake(writer, pa.table({"id": [i]}), mode="append")
        steps = {}
        time.sleep(IDLE_SECONDS)
        before = threads()
        dt = DeltaTable(d)
        steps["open"] = {"before": before, "after": threads()}
        time.sleep(IDLE_SECONDS)
        before = threads()
        dt.create_checkpoint()
        steps["checkpoint"] = {"before": before, "after": threads()}
        since = (dt.version() + 1) % interval  # commits after the last checkpoint, at the open
        return {"interval": interval, "version": dt.version(), "commits_since_checkpoint": since, "steps": steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--intervals", default="100,10", help="delta.checkpointInterval values, comma-separated")
    ap.add_argument("--commits", type=int, default=60, help="one-row appends after the table's creation")
    args = ap.parse_args()
    runs = []
    for interval in (int(i) for i in args.intervals.split(",")):
        r = measure(interval, args.commits)
        runs.append(r)
        print(f"delta.checkpointInterval {interval:>4}: version {r['version']}, {r['commits_since_checkpoint']} "
              f"commits after its last checkpoint; "
              + "; ".join(f"{k}: threads {v['before']} -> {v['after']}" for k, v in r["steps"].items()), flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"commits": args.commits, "runs": runs}, indent=2))
    print(f"figures written to {OUT}")


if __name__ == "__main__":
    sys.exit(main())
