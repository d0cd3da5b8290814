"""The CPU of the stream's one-row table commits as a table's log grows: what a batch touching
many tables costs once its tables are past their first versions (bench/many_tables.py measures
tables 1-5 versions old).

    .venv/bin/python bench/commit_growth.py [--tables N] [--rounds K] [--setups 100:100,100:checkpoint,...]

N Delta tables (default 30) of the stream's shape (bench/table_commits.py's) get K rounds
(default 200) of one one-row commit each (``apply_changes``, the stream's path for inserts, with
a transaction identifier and the offset's metadata), the tables of a round committed on the
stream's ``COMMIT_THREADS``. No compaction runs, so each commit adds a file, as between two
compactions of a stream's table. Each setup ``INTERVAL:REOPEN`` creates its own tables with
``delta.checkpointInterval`` INTERVAL, their checkpoints out of step (table i gets i × INTERVAL / N
commits first, untimed, as a stream finds its tables), and opens a table's handle afresh once
it is REOPEN versions past the version it was opened at (the stream's sinks before this bench:
pipelines/lake/tables.py ``RENEW_VERSIONS``, 100), or with REOPEN ``checkpoint`` right after
each commit that wrote a checkpoint and when worn (the stream's sinks now:
pipelines/stream/sinks.py ``Sinks.committed``). Printed per setup: the process's CPU seconds
(user + system) per commit over all rounds and the running mean every 50 rounds, checkpoints
and reopens included.
Excludes: compaction and vacuum, object stores, the stream's work before its commits.
Figures go to bench/out/commit_growth.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from deltalake import DeltaTable, write_deltalake  # noqa: E402

from bench.table_commits import by_write, cpu, one_row, write_figures  # noqa: E402
from pipelines.lake.tables import DEFAULT_CHECKPOINT_INTERVAL, RENEW_VERSIONS, checkpoint_interval  # noqa: E402
from pipelines.stream.commit import COMMIT_THREADS  # noqa: E402

OUT = REPO / "bench" / "out" / "commit_growth.json"


class Handle:
    """A table's handle, opened afresh once ``reopen`` versions past the version it was opened at,
    and with ``at_checkpoint`` also right after each commit that wrote a checkpoint (the stream's
    sinks: pipelines/stream/sinks.py ``Sinks.committed``)."""

    def __init__(self, uri: str, reopen: int, at_checkpoint: bool):
        self.uri, self.reopen, self.at_checkpoint = uri, reopen, at_checkpoint
        self.dt = DeltaTable(uri)
        self.opened = self.dt.version()
        self.interval = checkpoint_interval(self.dt)
        self.reopens = 0

    def commit(self, seq: int) -> None:
        if self.dt.version() - self.opened >= self.reopen:
            self._open()
        by_write(self.dt, seq)
        if self.at_checkpoint and (self.dt.version() + 1) % self.interval == 0:
            self._open()

    def _open(self) -> None:
        self.dt = DeltaTable(self.uri)
        self.opened = self.dt.version()
        self.reopens += 1


def measure(tables: int, rounds: int, interval: int, reopen: str) -> dict:
    root = Path(tempfile.mkdtemp(prefix="binlake-growth-bench-"))
    handles = []
    for i in range(tables):
        uri = str(root / f"t{i:04d}")
        write_deltalake(uri, one_row(0), configuration={"delta.checkpointInterval": str(interval)})
        before = DeltaTable(uri)
        for seq in range(1, 1 + i * interval // tables):  # untimed: checkpoints out of step, as a stream finds them
            by_write(before, seq)
        checkpoint = reopen == "checkpoint"
        handles.append(Handle(uri, RENEW_VERSIONS if checkpoint else int(reopen), checkpoint))
    c0, w0, running = cpu(), time.perf_counter(), []
    with ThreadPoolExecutor(COMMIT_THREADS) as pool:
        for seq in range(1, rounds + 1):
            list(pool.map(Handle.commit, handles, [interval + seq] * len(handles)))  # after those above
            if seq % 50 == 0:
                running.append(round((cpu() - c0) / (tables * seq) * 1000, 2))
    return {"checkpoint_interval": interval, "reopen": reopen,
            "cpu_ms_per_commit": (cpu() - c0) / (tables * rounds) * 1000, "running_mean_ms_every_50": running,
            "wall_s": time.perf_counter() - w0, "reopens": sum(h.reopens for h in handles),
            "load": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--setups", default=f"{DEFAULT_CHECKPOINT_INTERVAL}:{RENEW_VERSIONS},"
                                        f"{DEFAULT_CHECKPOINT_INTERVAL}:checkpoint,10:checkpoint",
                    help="INTERVAL:REOPEN,...: delta.checkpointInterval, and the versions a handle is kept or "
                         "'checkpoint' (opened afresh after each commit that wrote a checkpoint, and when worn)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    doc: dict = {"tables": args.tables, "rounds": args.rounds, "threads": COMMIT_THREADS, "nproc": os.cpu_count(),
                 "loadavg_start": [round(x, 2) for x in os.getloadavg()], "setups": []}
    for setup in args.setups.split(","):
        interval, reopen = setup.split(":")
        r = measure(args.tables, args.rounds, int(interval), reopen)
        doc["setups"].append(r)
        when = "after each checkpoint" if reopen == "checkpoint" else f"every {reopen} versions"
        print(f"  checkpoint every {interval:>3} commits, handle reopened {when}: "
              f"{r['cpu_ms_per_commit']:.2f} ms CPU per commit (running mean every 50 rounds: "
              f"{', '.join(f'{x:.2f}' for x in r['running_mean_ms_every_50'])}); {r['reopens']} reopens; "
              f"wall {r['wall_s']:.1f} s; load {r['load']:.1f}", flush=True)
    write_figures(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
