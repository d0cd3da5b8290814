"""The lake on object storage: snapshot and stream throughput with the lake on a loopback
S3 endpoint, as a ratio of the same run on a local folder, and the object-store requests
per stream micro-batch.

    .venv/bin/python bench/object_store.py [--rows N] [--changes N] [--repeat K]
                                           [--only snapshot|stream|steady|writes] [--strict]

One run starts a throwaway MariaDB (devtools.local_mariadb) and moto's S3 server in a
process of its own (tests/s3_endpoint.py: it counts every request by kind). Each
measurement alternates a run into a fresh local folder and a run into a fresh bucket
(``s3://<bucket>/lake``, the same config otherwise) ``--repeat`` times and reports
medians; ratio = S3 rows/s ÷ local rows/s (goals: snapshot ≥ 0.7, stream ≥ 0.8).

1. Snapshot: the 7-column table of bench/snapshot.py (N rows, loaded with sql_log_bin=0,
   so no chunk window sees a change), ``SnapshotJob(cfg, spark).run()`` on local[*] in
   this process (after an uncounted warm-up round of both); Delta row count checked
   against N.
2. Stream: the backlog of bench/stream.py (N row changes, 80/15/5 insert/update/delete
   transactions of 100-1000 rows on three tables), ``StreamEngine(cfg, until_now=True)``
   from the backlog's start on a fresh sink; Delta row counts checked against MySQL. The
   runs start once the backlog's last change is over CATCHUP_LAG_SECONDS old, so every run
   reads it as the backlog it is (catch-up batches, cdc_core/batch/micro_batch.py), not only the
   later ones.
   Requests per micro-batch = (requests of the run − requests of the same engine run over
   an empty range, i.e. start-up and shutdown) ÷ batches, by kind.
3. Steady state (``--only steady``): a live stream on one table (``bench.steady``) while a
   writer commits a one-row insert every ``--steady-every`` seconds, once for each checkpoint
   interval of ``--steady-intervals`` (``sink.table_properties``, default 10 and 100); after
   ``STEADY_WARMUP`` transactions the requests are counted over ``--steady-tx`` more and divided
   by the data table's commits in that window, by kind (data table, control tables). What a
   table's checkpoint costs on an object store is what these runs differ by.
4. Writes: one 250,000-row Arrow table written as Parquet by the snapshot tasks' path
   (pipelines.lake.files.write_parquet: one PutObject on S3, pipelines/lake/storage.py) and by pyarrow's own
   S3FileSystem, to the bucket and to a local folder: the measurement behind the choice of
   write path.

moto is a Python server on the same two cores: its CPU seconds are printed, and they are
part of what the S3 runs pay (a real store's work happens elsewhere, its latency is higher).
Figures go to bench/out/object_store.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.fs as pafs  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from bench.snapshot import DB as SNAP_DB  # noqa: E402
from bench.snapshot import TABLE as SNAP_TABLE  # noqa: E402
from bench.snapshot import binlake_config, load_table  # noqa: E402
from bench.stream import DB, TABLES, Backlog, create_tables, generate_backlog, stream_config  # noqa: E402
from cdc_core.batch.micro_batch import CATCHUP_LAG_SECONDS  # noqa: E402
from cdc_core.config import BinlakeConfig, SinkConfig, parse_config  # noqa: E402
from cdc_core.offset.position import master_position  # noqa: E402
from devtools.local_mariadb import LocalMariaDB  # noqa: E402
from pipelines.lake.files import write_parquet  # noqa: E402
from pipelines.lake.reads import count_rows  # noqa: E402
from pipelines.lake.tables import open_table, table_uri  # noqa: E402
from pipelines.snapshot.driver import SnapshotJob  # noqa: E402
from pipelines.stream import StreamEngine  # noqa: E402
from tests.s3_endpoint import REGION, S3Server  # noqa: E402

OUT = REPO / "bench" / "out" / "object_store.json"
GOALS = {"snapshot": 0.7, "stream": 0.8}


class Runs:
    """Where each run's lake goes: a fresh local folder or a fresh bucket."""

    def __init__(self, s3: S3Server, work: Path):
        self.s3, self.work = s3, work

    def sink(self, where: str) -> SinkConfig:
        if where == "local":
            return SinkConfig(path=str(self.work / f"lake-{uuid.uuid4().hex[:8]}"))
        bucket = self.s3.create_bucket(f"bench-{uuid.uuid4().hex[:12]}")
        return SinkConfig(path=f"s3://{bucket}/lake", storage_options=self.s3.storage_options())

    def moto_cpu(self) -> float:
        t = psutil.Process(self.s3.proc.pid).cpu_times()
        return t.user + t.system


def with_sink(cfg: BinlakeConfig, sink: SinkConfig) -> BinlakeConfig:
    return cfg.model_copy(update={"sink": sink})


def timed(runs: Runs, where: str, fn) -> dict:
    """Run ``fn()``; its wall seconds, moto's CPU seconds and the requests the store served."""
    runs.s3.requests(reset=True)
    cpu0 = runs.moto_cpu()
    t0 = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - t0
    return {"where": where, "seconds": seconds, "moto_cpu_s": runs.moto_cpu() - cpu0,
            "requests": dict(runs.s3.requests()), **out}


def median(results: list[dict], key: str = "seconds") -> float:
    return statistics.median(r[key] for r in results)


def report(name: str, n: int, results: dict[str, list[dict]], goal: float) -> dict:
    local, s3 = median(results["local"]), median(results["s3"])
    ratio = local / s3  # (n / s3) / (n / local)
    print(f"  {name}: local {local:.2f} s ({n / local:,.0f} rows/s), S3 {s3:.2f} s ({n / s3:,.0f} rows/s) "
          f"(medians); S3/local throughput {ratio:.2f}, goal >= {goal}: {'PASS' if ratio >= goal else 'MISS'}; "
          f"moto CPU {median(results['s3'], 'moto_cpu_s'):.1f} s per S3 run", flush=True)
    return {"local_median_s": local, "s3_median_s": s3, "ratio": ratio, "goal": goal, "pass": ratio >= goal,
            "runs": results}


# --------------------------------------------------------------------------- 1. snapshot


def measure_snapshot(server: LocalMariaDB, runs: Runs, args) -> dict:
    from pipelines.spark.session import get_spark

    print(f"\n1. snapshot: loading {args.rows:,} rows ...", flush=True)
    load_table(server, args.rows)
    spark = get_spark("local[*]")
    results: dict[str, list[dict]] = {"local": [], "s3": []}
    try:
        # Round 0 warms up (Spark's Python workers start, connectorx loads) and is not counted.
        for i in range(args.repeat + 1):
            for where in ("local", "s3") if i % 2 == 0 else ("s3", "local"):
                cfg = with_sink(binlake_config(server, "unused", f"bench_{where}_{i}", args.parallelism,
                                               args.chunk_size), runs.sink(where))

                def run(cfg=cfg) -> dict:
                    summary = SnapshotJob(cfg, spark).run()
                    return {"chunks": summary.tables[0].chunks}

                r = timed(runs, where, run)
                rows = count_rows(open_table(table_uri(cfg.sink.path, f"{SNAP_DB}.{SNAP_TABLE}"),
                                             cfg.sink.storage_options))
                if rows != args.rows:
                    raise AssertionError(f"snapshot into {where}: Delta has {rows} rows, MySQL {args.rows}")
                if i:
                    results[where].append(r)
                print(f"  [{i}/{args.repeat}{' warm-up' if not i else ''}] {where:<5} {r['seconds']:7.2f} s  "
                      f"{sum(r['requests'].values()):>6} requests", flush=True)
    finally:
        spark.stop()
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE `{SNAP_DB}`")  # bench/stream.py's backlog creates it again
    return report("snapshot", args.rows, results, GOALS["snapshot"])


# --------------------------------------------------------------------------- 2. stream


def run_stream(server: LocalMariaDB, runs: Runs, where: str, backlog: Backlog, run_id: str, server_id: int,
               args, empty: bool = False) -> dict:
    start = backlog.end if empty else backlog.start
    cfg = with_sink(parse_config(stream_config(server, Path("unused"), f"bench_{run_id}", server_id, DB, start,
                                               args)), runs.sink(where))

    def run() -> dict:
        s = StreamEngine(cfg, until_now=True).run()
        return {"changes": s.changes, "batches": s.batches, "table_commits": s.commits}

    r = timed(runs, where, run)
    if empty:  # over an empty range no table gets a commit (nor a Delta table)
        return r
    counts = {t: count_rows(open_table(table_uri(cfg.sink.path, f"{DB}.{t}"), cfg.sink.storage_options))
              for t in TABLES}
    if r["changes"] != backlog.changes or counts != backlog.mysql_rows:
        raise AssertionError(f"stream into {where}: {r['changes']} changes, Delta rows {counts}, MySQL "
                             f"{backlog.mysql_rows}")
    return r


def measure_stream(server: LocalMariaDB, runs: Runs, args) -> dict:
    print(f"\n2. stream: generating {args.changes:,} row changes ...", flush=True)
    create_tables(server)
    backlog = generate_backlog(server, args.changes)
    time.sleep(CATCHUP_LAG_SECONDS + 1)  # binlog timestamps are whole seconds
    results: dict[str, list[dict]] = {"local": [], "s3": []}
    sid = iter(range(6500, 6600))
    for i in range(args.repeat):
        for where in ("local", "s3") if i % 2 == 0 else ("s3", "local"):
            r = run_stream(server, runs, where, backlog, f"{where}_{i}", next(sid), args)
            results[where].append(r)
            print(f"  [{i + 1}/{args.repeat}] {where:<5} {r['seconds']:7.2f} s  {r['batches']} batches, "
                  f"{r['table_commits']} table commits, {sum(r['requests'].values())} requests", flush=True)
    doc = report("stream", backlog.changes, results, GOALS["stream"])
    idle = run_stream(server, runs, "s3", backlog, "idle", next(sid), args, empty=True)
    per_batch = Counter()
    for r in results["s3"]:
        for kind, n in r["requests"].items():
            per_batch[kind] += (n - idle["requests"].get(kind, 0)) / r["batches"] / len(results["s3"])
    total = sum(per_batch.values())
    commits = statistics.mean(r["table_commits"] / r["batches"] for r in results["s3"])
    print(f"  object-store requests per micro-batch (S3 runs, start-up and shutdown of {sum(idle['requests'].values())}"
          f" requests taken out): {total:.1f} for {commits:.2f} table commits + 1 checkpoint")
    for kind, n in per_batch.most_common():
        print(f"    {kind:<24}{n:>8.1f}")
    doc.update({"backlog": backlog.to_dict(), "idle_run": idle, "requests_per_batch": dict(per_batch),
                "requests_per_batch_total": total, "table_commits_per_batch": commits})
    return doc


# --------------------------------------------------------------------------- 3. steady state

STEADY_TABLE = "steady"
STEADY_WARMUP = 10  # transactions before the count starts: the table exists, start-up is over


def run_steady(server: LocalMariaDB, runs: Runs, interval: str, server_id: int, args) -> dict:
    """One live stream on ``bench.steady`` with ``delta.checkpointInterval`` ``interval``; the
    requests per data-table commit over ``--steady-tx`` one-row transactions after the warm-up."""
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{DB}`")
        cur.execute(f"DROP TABLE IF EXISTS `{DB}`.`{STEADY_TABLE}`")
        cur.execute(f"CREATE TABLE `{DB}`.`{STEADY_TABLE}` (id INT PRIMARY KEY, v VARCHAR(20))")
        start = master_position(cur)
    sink = runs.sink("s3").model_copy(update={"table_properties": {"delta.checkpointInterval": interval}})
    cfg = with_sink(parse_config(stream_config(server, Path("unused"), f"steady_{interval}", server_id, DB, start,
                                               args)), sink)
    cfg = cfg.model_copy(update={"source": cfg.source.model_copy(update={"tables": [rf"{DB}\.{STEADY_TABLE}"]})})
    engine = StreamEngine(cfg)
    thread = threading.Thread(target=engine.run, name="steady-stream", daemon=True)
    thread.start()
    uri = table_uri(cfg.sink.path, f"{DB}.{STEADY_TABLE}")
    with server.connect() as conn, conn.cursor() as cur:
        for i in range(STEADY_WARMUP + args.steady_tx):
            if i == STEADY_WARMUP:
                time.sleep(2 * args.steady_every)  # the warm-up's last batch committed
                first = open_table(uri, cfg.sink.storage_options).version()
                runs.s3.requests(reset=True)
            time.sleep(args.steady_every)
            cur.execute(f"INSERT INTO `{DB}`.`{STEADY_TABLE}` VALUES (%s, 'x')", (i,))
        time.sleep(2 * args.steady_every)
        counted = runs.s3.requests()  # before the reads below and the stop's own requests
        last = open_table(uri, cfg.sink.storage_options).version()
    engine.request_stop()
    thread.join(60)
    rows = count_rows(open_table(uri, cfg.sink.storage_options))
    if rows != STEADY_WARMUP + args.steady_tx:
        raise AssertionError(f"steady stream: Delta has {rows} rows, MySQL {STEADY_WARMUP + args.steady_tx}")
    commits = last - first
    data = sum(n for kind, n in counted.items() if not kind.endswith("(control)"))
    control = sum(n for kind, n in counted.items() if kind.endswith("(control)"))
    print(f"  checkpointInterval {interval:>4}: {commits} data commits, {sum(counted.values())} requests: "
          f"{data / commits:.1f} per data commit on the data table, {control / commits:.1f} on the control "
          f"tables", flush=True)
    return {"interval": interval, "data_commits": commits, "requests": dict(counted),
            "data_table_per_commit": data / commits, "control_per_commit": control / commits}


def measure_steady(server: LocalMariaDB, runs: Runs, args) -> dict:
    print(f"\n3. steady state: one-row transactions every {args.steady_every} s, {args.steady_tx} counted "
          f"per checkpoint interval ...", flush=True)
    return {"runs": [run_steady(server, runs, interval, 6600 + i, args)
                     for i, interval in enumerate(args.steady_intervals.split(","))]}


# --------------------------------------------------------------------------- 4. write path


def measure_writes(runs: Runs, args) -> dict:
    n = 250_000
    rng = np.random.default_rng(7)
    table = pa.table({"id": pa.array(np.arange(n), pa.int64()), "qty": pa.array(rng.integers(0, 100_000, n),
                                                                              pa.int32()),
                      "name": pa.array([f"user-{i}" for i in range(n)]), "score": pa.array(rng.random(n)),
                      "note": pa.array([f"{i * 7919:032x}" for i in range(n)])})
    local, s3 = runs.sink("local"), runs.sink("s3")
    os.makedirs(local.path, exist_ok=True)
    bucket_path = s3.path.removeprefix("s3://")
    o = s3.storage_options
    native = pafs.S3FileSystem(access_key=o["AWS_ACCESS_KEY_ID"], secret_key=o["AWS_SECRET_ACCESS_KEY"],
                               region=REGION, endpoint_override=o["AWS_ENDPOINT_URL"].removeprefix("http://"),
                               scheme="http")

    def pyarrow_s3() -> None:
        pq.write_table(table, f"{bucket_path}/part-{uuid.uuid4().hex}.parquet", filesystem=native,
                       compression="snappy")

    ways = {"binlake (write_parquet: one PutObject) → S3": lambda: write_parquet(s3.path, table, s3.storage_options),
            "pyarrow S3FileSystem → S3": pyarrow_s3,
            "binlake → local folder": lambda: write_parquet(local.path, table)}
    seconds: dict[str, list[float]] = {k: [] for k in ways}
    for _ in range(args.repeat + 1):
        for k, fn in ways.items():
            t0 = time.perf_counter()
            fn()
            seconds[k].append(time.perf_counter() - t0)
    print(f"\n4. Parquet write of {n:,} rows (median of {args.repeat + 1}):")
    for k, v in seconds.items():
        print(f"  {k:<42}{statistics.median(v):7.3f} s")
    return {"rows": n, "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=500_000, help="snapshot: rows of the table")
    ap.add_argument("--changes", type=int, default=200_000, help="stream: row changes in the backlog")
    ap.add_argument("--repeat", type=int, default=2, help="alternating local/S3 runs per measurement")
    ap.add_argument("--parallelism", type=int, default=4)
    ap.add_argument("--chunk-size", type=int, default=8096)
    ap.add_argument("--max-batch-rows", type=int, help="stream.max_batch_rows (default: the config default)")
    ap.add_argument("--max-batch-seconds", type=float, help="stream.max_batch_seconds (default: config default)")
    ap.add_argument("--catchup-batch-rows", type=int,
                    help="stream.catchup_batch_rows (default: the config default)")
    ap.add_argument("--steady-every", type=float, default=0.6, help="steady: seconds between transactions")
    ap.add_argument("--steady-tx", type=int, default=60, help="steady: transactions counted per interval")
    ap.add_argument("--steady-intervals", default="10,100", help="steady: delta.checkpointInterval values")
    ap.add_argument("--only", choices=("snapshot", "stream", "steady", "writes"), action="append")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a goal is missed")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    only = set(args.only or ("snapshot", "stream", "steady", "writes"))
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    env = {"nproc": os.cpu_count(), "loadavg_start": [round(x, 2) for x in os.getloadavg()],
           "started_at": dt.datetime.now(dt.UTC).isoformat()}
    print(f"machine: nproc {env['nproc']}, load average {env['loadavg_start']}")
    work = Path(tempfile.mkdtemp(prefix="binlake-object-store-bench-"))
    server, s3 = LocalMariaDB(server_id=1), S3Server.start()
    doc: dict = {}
    try:
        server.start()
        runs = Runs(s3, work)
        print(f"MariaDB on port {server.port}, S3 (moto) at {s3.endpoint}", flush=True)
        if "snapshot" in only:
            doc["snapshot"] = measure_snapshot(server, runs, args)
        if "stream" in only:
            doc["stream"] = measure_stream(server, runs, args)
        if "steady" in only:
            doc["steady"] = measure_steady(server, runs, args)
        if "writes" in only:
            doc["writes"] = measure_writes(runs, args)
    finally:
        s3.stop()
        server.cleanup()
        shutil.rmtree(work, ignore_errors=True)
    env["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    print(f"load average at the end {env['loadavg_end']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "env": env, **doc},
                                   indent=2, default=str) + "\n")
    print(f"figures written to {args.out}")
    missed = [k for k in GOALS if k in doc and not doc[k]["pass"]]
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
