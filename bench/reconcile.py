"""Reconcile benchmark: per-chunk checksums of a 1,000,000-row table on the server and on Delta.

    .venv/bin/python bench/reconcile.py [--rows N] [--chunk-size C] [--repeat K]

One run starts a throwaway MariaDB (devtools.local_mariadb), loads N rows of a 6-column
table (BIGINT key, INT, VARCHAR, DECIMAL(12,2), VARCHAR, DATETIME(3)) from the Sequence
engine, snapshots it with binlake (SnapshotJob on local[*]; the Spark session is stopped
before anything is timed), then runs ``reconcile_tables`` K times and reports, per run:
the whole wall time; the server's checksum time and Delta's (each side's own wall time:
they overlap, the server's queries run in a thread while DataFusion reads Delta); the CPU
seconds mariadbd spent (from its /proc times before and after, via psutil) per million
rows; this process's CPU seconds (DataFusion and numpy). Every run must find the table
equal. Figures go to bench/out/reconcile.json. Target: ≤ 10 s for 1M rows.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import psutil  # noqa: E402

from bench.snapshot import binlake_config, load_table  # noqa: E402
from devtools.local_mariadb import LocalMariaDB  # noqa: E402
from pipelines.reconcile.checksums import reconcile_tables  # noqa: E402
from pipelines.snapshot.driver import SnapshotJob  # noqa: E402
from pipelines.spark.session import get_spark  # noqa: E402

OUT = REPO / "bench" / "out" / "reconcile.json"
TARGET_S = 10.0

DDL = """CREATE TABLE `{db}`.`{table}` (
  id BIGINT NOT NULL PRIMARY KEY,
  qty INT NOT NULL,
  name VARCHAR(32) NOT NULL,
  price DECIMAL(12,2) NOT NULL,
  note VARCHAR(64) NULL,
  created_at DATETIME(3) NOT NULL
) ENGINE=InnoDB"""


# Row ``seq`` in that shape.
VALUES = ("seq, seq % 100000, CONCAT('user-', seq), (seq % 10000000) / 100, IF(seq % 7 = 0, NULL, MD5(seq)), "
          "TIMESTAMP'2020-01-01 00:00:00' + INTERVAL seq * 1001000 MICROSECOND")


def cpu_seconds(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--chunk-size", type=int, default=8096, help="source.snapshot.chunk_size")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")

    env = {"nproc": os.cpu_count(), "loadavg_start": [round(x, 2) for x in os.getloadavg()],
           "started_at": dt.datetime.now(dt.UTC).isoformat()}
    work = Path(tempfile.mkdtemp(prefix="binlake-bench-reconcile-"))
    server = LocalMariaDB(server_id=1)
    try:
        server.start()
        print(f"MariaDB on port {server.port}; loading {args.rows:,} rows ...", flush=True)
        env["load_s"] = load_table(server, args.rows, DDL, VALUES)
        cfg = binlake_config(server, str(work / "lake"), "bench_reconcile", 2, args.chunk_size)
        spark = get_spark("local[*]")
        t0 = time.perf_counter()
        summary = SnapshotJob(cfg, spark).run()
        env["snapshot_s"] = time.perf_counter() - t0
        spark.stop()
        assert summary.tables[0].delta_rows == args.rows
        print(f"  loaded in {env['load_s']:.1f} s, snapshot {env['snapshot_s']:.1f} s "
              f"({summary.tables[0].chunks} chunks)", flush=True)

        mariadbd = psutil.Process(server._proc.pid)
        runs = []
        for i in range(args.repeat):
            db0, me0 = cpu_seconds(mariadbd), self_cpu()
            t0 = time.perf_counter()
            report = reconcile_tables(cfg, rechecks=0)
            seconds = time.perf_counter() - t0
            (t,) = report.tables
            if not report.equal or t.mysql_rows != args.rows or t.delta_rows != args.rows:
                raise AssertionError(f"reconcile found differences: {t.to_json()}")
            run = {"seconds": seconds, "server_checksum_s": t.server_seconds, "delta_checksum_s": t.delta_seconds,
                   "chunks": t.chunks_checked, "mariadbd_cpu_s": cpu_seconds(mariadbd) - db0,
                   "binlake_cpu_s": self_cpu() - me0}
            run["mariadbd_cpu_s_per_million_rows"] = run["mariadbd_cpu_s"] * 1e6 / args.rows
            runs.append(run)
            print(f"  [{i + 1}/{args.repeat}] reconcile {seconds:6.2f} s  (server checksums {t.server_seconds:.2f} s, "
                  f"Delta checksums {t.delta_seconds:.2f} s, overlapped; mariadbd CPU {run['mariadbd_cpu_s']:.2f} s, "
                  f"binlake CPU {run['binlake_cpu_s']:.2f} s; {t.chunks_checked} chunks)", flush=True)
        env["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        verdict = "PASS" if median["seconds"] <= TARGET_S * args.rows / 1_000_000 else "MISS"
        print(f"\n  median of {len(runs)}: {median['seconds']:.2f} s for {args.rows:,} rows "
              f"(target ≤ {TARGET_S:.0f} s per million: {verdict}); "
              f"server checksums {median['server_checksum_s']:.2f} s, "
              f"Delta {median['delta_checksum_s']:.2f} s; mariadbd "
              f"{median['mariadbd_cpu_s_per_million_rows']:.2f} CPU s per million rows; load average "
              f"{env['loadavg_start']} → {env['loadavg_end']}")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "env": env, "runs": runs,
                                        "median": median, "verdict": verdict}, indent=2) + "\n")
        print(f"  figures written to {args.out}")
        return 0
    finally:
        server.cleanup()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
