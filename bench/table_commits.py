"""The CPU of one stream commit per table, as a batch touching many tables makes them: what a
batch's table commits cost beyond binlake's own Python, and whether another way to commit
would cost less.

    .venv/bin/python bench/table_commits.py [--tables N] [--rounds K] [--threads T]

N Delta tables (default 500) of the stream's shape (bench/snapshot.py's 7 columns and the
metadata columns) get K rounds (default 3) of one one-row commit each, the tables of a round
committed on T threads (default pipelines/stream/commit.py's ``COMMIT_THREADS``); each commit
carries a transaction identifier and the offset's commit metadata, as the stream's do. Three
ways, each its own rounds, the process's CPU seconds (user + system) per table commit:

1. ``apply_changes`` (pipelines/lake/apply.py), the stream's path for a batch of inserts:
   delta-rs's ``write_deltalake``, which writes the Parquet file and commits.
2. The file written by pyarrow (``pipelines.lake.files.write_parquet``, GIL released) and
   committed with delta-rs's transaction API (``create_write_transaction``), then
   ``update_incremental`` (a transaction does not move the handle to its commit, and the next
   batch's commit needs it there).
3. A commit without data (``write_deltalake`` of no rows): the floor any way of committing
   through delta-rs pays.

The ratio is (2)'s CPU over (1)'s: above 1, the stream's path is the cheaper. The wall time of
a round is printed too, for what a batch touching N tables waits (bench/many_tables.py times
it inside the stream). Excludes: the stream's own work before the commits (planning, Arrow
conversion), object stores. Figures go to bench/out/table_commits.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import pyarrow as pa  # noqa: E402
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake  # noqa: E402

from pipelines.lake.apply import apply_changes  # noqa: E402
from pipelines.lake.files import write_parquet  # noqa: E402
from pipelines.lake.tables import post_commit_hooks  # noqa: E402
from pipelines.stream.commit import COMMIT_THREADS  # noqa: E402

OUT = REPO / "bench" / "out" / "table_commits.json"
SCHEMA = pa.schema([("id", pa.int64()), ("a", pa.int32()), ("b", pa.string()), ("c", pa.float64()),
                    ("d", pa.timestamp("us", tz="UTC")), ("e", pa.string()), ("f", pa.int64()),
                    ("_cdc_op", pa.string()), ("_cdc_seq", pa.int64())])


def one_row(i: int) -> pa.Table:
    return pa.table({"id": [i], "a": [1], "b": ["x" * 20], "c": [1.5], "d": pa.array([0], SCHEMA.field("d").type),
                     "e": ["y"], "f": [7], "_cdc_op": ["c"], "_cdc_seq": [i]}, schema=SCHEMA)


def props(seq: int) -> CommitProperties:
    """A stream commit's properties: the offset's metadata and a transaction identifier."""
    return CommitProperties(custom_metadata={"binlake.stream.offset": json.dumps({"file": "binlog.000001",
                                                                                  "pos": seq, "rows": 1})},
                            app_transactions=[Transaction("binlake-bench", seq)])


def by_write(dt: DeltaTable, seq: int) -> None:
    empty = SCHEMA.empty_table()
    apply_changes(dt, ("id",), one_row(seq), empty, empty, props(seq))


def by_transaction(dt: DeltaTable, seq: int) -> None:
    added = write_parquet(dt.table_uri, one_row(seq), kind="stream").add_action()
    dt.create_write_transaction([added], mode="append", schema=SCHEMA, commit_properties=props(seq),
                                post_commithook_properties=post_commit_hooks(dt))
    dt.update_incremental()


def without_data(dt: DeltaTable, seq: int) -> None:
    write_deltalake(dt, SCHEMA.empty_table(), mode="append", commit_properties=props(seq),
                    post_commithook_properties=post_commit_hooks(dt))


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=COMMIT_THREADS)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="binlake-commits-bench-"))
    tables = []
    for i in range(args.tables):
        write_deltalake(str(root / f"t{i:04d}"), one_row(0))
        tables.append(DeltaTable(str(root / f"t{i:04d}")))
    doc: dict = {"tables": args.tables, "threads": args.threads, "nproc": os.cpu_count(),
                 "loadavg_start": [round(x, 2) for x in os.getloadavg()]}
    seq = 0
    with ThreadPoolExecutor(args.threads) as pool:
        for name, commit in (("write", by_write), ("transaction", by_transaction), ("no_data", without_data)):
            rounds = []
            for _ in range(args.rounds):
                seq += 1
                c0, w0 = cpu(), time.perf_counter()
                list(pool.map(commit, tables, [seq] * len(tables)))
                rounds.append({"cpu_ms_per_table": (cpu() - c0) / args.tables * 1000,
                               "wall_s": time.perf_counter() - w0, "load": os.getloadavg()[0]})
            doc[name] = {"rounds": rounds, "cpu_ms_per_table": min(r["cpu_ms_per_table"] for r in rounds)}
            walls = ", ".join(f"{r['wall_s']:.2f}" for r in rounds)
            print(f"  {name:>11}: CPU per table commit {doc[name]['cpu_ms_per_table']:.2f} ms (best of "
                  f"{args.rounds}); a round of {args.tables} tables {walls} s; load {rounds[-1]['load']:.1f}",
                  flush=True)
    doc["ratio"] = doc["transaction"]["cpu_ms_per_table"] / doc["write"]["cpu_ms_per_table"]
    write_figures(args.out, doc)
    print(f"  transaction API / write_deltalake CPU: {doc['ratio']:.2f}")
    return 0


def write_figures(path: Path, doc: dict) -> None:
    """``doc`` with the load average at the end, as JSON at ``path``."""
    doc["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
