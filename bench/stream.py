"""Binlog stream benchmark: throughput, latency and memory of the stream engine (pipelines/stream/).

    .venv/bin/python bench/stream.py [--rows N] [--repeat K] [--latency-seconds S]
                                     [--only throughput|latency|memory] [--mix I/U/D] [--compare] [--metrics]
                                     [--strict]

One run starts a throwaway MariaDB (devtools.local_mariadb, server_id 1). No snapshot
is taken: every measurement creates its tables empty before it records a start
position, and the stream starts there with ``source.startup.mode: specific`` (file/pos
= that position, on a fresh sink and pipeline name, so there is no checkpoint). The
Delta tables are created empty by the engine (ensure_table), so after the stream
Delta must equal MySQL.

Backlog (shared by 1 and 3). Three tables ``bench.t1..t3`` of 7 columns (BIGINT PK,
INT, VARCHAR(32), DECIMAL(12,2), DATETIME, DOUBLE, VARCHAR(64), as in snapshot.py).
SHOW MASTER STATUS → N row changes in transactions of 100-1000 rows on a random
table, by rows about 80 % multi-row INSERTs (pymysql executemany), 15 % range UPDATEs
of live rows and 5 % DELETEs of the oldest rows (--mix) → SHOW MASTER STATUS. The range
(start, end] holds exactly those changes. Throughput and memory read it with --until
now semantics, so they run first; the latency load comes last.

1. Throughput, alternating K times over that range:
   (a) python-mysql-replication alone: BinLogStreamReader(is_mariadb=False, log_file/
       log_pos = start, resume_stream, blocking, only row events and XidEvent), iterating
       ``event.rows`` of each row event until the reader's position reaches ``end``
       (XidEvent is in only_events only so that the loop sees the end position: the
       range ends with a COMMIT, after which a blocking reader would wait forever);
   (b) binlake end to end into Delta: StreamEngine(cfg, until_now=True).run() in this
       process (its reader is a forked child), then Delta row counts = MySQL's per table
       (and with --compare a row-by-row pipelines.reconcile.rows.compare after the first run).
   rows/s = changes / wall seconds; reported: medians, and (b)/(a) (target ≥ 0.8), and
   CPU seconds of the reader, the engine process and mariadbd per run (getrusage, psutil).
   With ``--metrics``, each repeat also runs (m): (b) serving its Prometheus endpoint
   (``metrics.port``, pipelines/stream/metrics.py) while a thread scrapes it every second, right
   after (b) on the same backlog: the cost of the metrics is (m) against (b).
2. Latency: table ``lat.events``; ``binlake stream`` runs as a subprocess (startup
   specific at the binlog end just before it starts). After a warm-up transaction is
   visible in Delta, a writer inserts 20 rows per transaction at 100 transactions/s
   (2,000 rows/s, paced) for S seconds and records time.time() right after each COMMIT
   returns, per row id. A poller thread reads the Delta table every 50 ms
   (update_incremental; on a new version it reads only the id column of files it has
   not seen) and records when each id first became visible. Latency = visible − commit;
   p50/p95/p99/max are reported (targets p50 ≤ 1.5 s, p99 ≤ 5 s), and, from the Delta
   commit timestamps, how much of it is the engine (MySQL commit → Delta commit) and how
   much the poller (Delta commit → seen).
3. Memory: ``binlake stream -c FILE --until now`` as a subprocess over the backlog
   (fresh sink). Every 50 ms the RSS of the process and of its descendants (the reader
   is a forked child) is read and summed; reported: peak of the sum (pages the fork
   shares are counted twice), peak PSS sum (sampled every ~0.5 s), per-process peaks,
   ru_maxrss from wait4 (the largest single process, which sampling cannot miss) and the
   bound ru_maxrss + the other processes' peaks. Target: the larger of the summed peak
   and that bound under 1 GiB.

Tables are printed; figures go to bench/out/stream_{throughput,latency,memory}.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import logging
import math
import os
import platform
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import psutil  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import yaml  # noqa: E402
from deltalake import DeltaTable  # noqa: E402
from deltalake.exceptions import TableNotFoundError  # noqa: E402
from pymysqlreplication import BinLogStreamReader  # noqa: E402
from pymysqlreplication.event import XidEvent  # noqa: E402
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent  # noqa: E402

from bench.bytecode import compile_product  # noqa: E402
from bench.snapshot import DDL, VALUES  # noqa: E402  (the same 7-column table as the snapshot benchmark)
from cdc_core.config import BinlakeConfig, parse_config  # noqa: E402
from cdc_core.offset.position import BinlogPosition, master_position  # noqa: E402
from cdc_core.schema.table import describe_table  # noqa: E402
from cdc_core.source.connection import connect, connection_settings  # noqa: E402
from devtools.local_mariadb import LocalMariaDB, _free_port  # noqa: E402
from pipelines.reconcile.rows import compare  # noqa: E402
from pipelines.stream import StreamEngine, StreamSummary  # noqa: E402

OUT_DIR = REPO / "bench" / "out"
DB = "bench"
TABLES = ("t1", "t2", "t3")
LAT_DB, LAT_TABLE = "lat", "events"
COLUMNS = ("id", "qty", "name", "price", "created_at", "score", "note")
INSERT = "INSERT INTO `{db}`.`{table}` (" + ", ".join(COLUMNS) + ") VALUES (" + ", ".join(["%s"] * 7) + ")"
MIX = (0.80, 0.15, 0.05)  # default share of transactions (≈ of rows) that insert, update, delete
TX_ROWS = (100, 1000)
EPOCH_2020 = 1577836800  # 2020-01-01 00:00:00 UTC

TARGET_RATIO = 0.8
TARGET_P50_S, TARGET_P99_S = 1.5, 5.0
TARGET_RSS_MB = 1024.0
PASSWORD_ENV = "BINLAKE_BENCH_PASSWORD"

SERVER_ID_RAW, SERVER_ID_STREAM, SERVER_ID_LATENCY, SERVER_ID_MEMORY = 6000, 6100, 6200, 6300


# --------------------------------------------------------------------------- helpers


def row_values(i: int) -> tuple:
    """The 7 column values of row ``i`` (as snapshot.py's generated table)."""
    return (i, i % 100000, f"user-{i}", f"{(i % 10_000_000) / 100:.2f}",
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(EPOCH_2020 + i)),
            None if i % 10 == 0 else i / 7, None if i % 7 == 0 else hashlib.md5(str(i).encode()).hexdigest())


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, math.ceil(p / 100 * len(sorted_values)) - 1))
    return sorted_values[k]


def fmt_rate(rows: int, seconds: float) -> str:
    return f"{rows / seconds:,.0f}" if seconds > 0 else "-"


def stream_config(server: LocalMariaDB, lake: Path, name: str, server_id: int, database: str,
                      start: BinlogPosition, args: argparse.Namespace, password: str | None = None) -> dict:
    """A config mapping for the stream engine: captures ``database``, starts at ``start``."""
    stream: dict = {}
    if args.max_batch_rows:
        stream["max_batch_rows"] = args.max_batch_rows
    if args.max_batch_seconds:
        stream["max_batch_seconds"] = args.max_batch_seconds
    if args.catchup_batch_rows:
        stream["catchup_batch_rows"] = args.catchup_batch_rows
    return {
        "pipeline": {"name": name},
        "source": {"host": server.host, "port": server.port, "user": server.user,
                   "password": password if password is not None else server.password,
                   "server_id": server_id, "tables": [rf"{database}\..*"],
                   "startup": {"mode": "specific", "file": start.file, "pos": start.pos}},
        # bench/maintenance.py measures latency with and without lake maintenance (sink.maintenance)
        "sink": {"path": str(lake), **({"maintenance": m} if (m := getattr(args, "maintenance", None)) else {})},
        **({"stream": stream} if stream else {}),
    }


def write_config_file(path: Path, raw: dict) -> None:
    """YAML config for the CLI; the password comes from ${BINLAKE_BENCH_PASSWORD}."""
    raw = json.loads(json.dumps(raw))
    raw["source"]["password"] = "${" + PASSWORD_ENV + "}"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))


def binlake_command() -> list[str]:
    script = Path(sys.executable).with_name("binlake")
    return [str(script)] if script.exists() else [sys.executable, "-m", "pipelines.cli"]


def delta_counts(lake: Path, database: str, tables: tuple[str, ...]) -> dict[str, int]:
    return {t: DeltaTable(str(lake / database / t)).to_pyarrow_dataset().count_rows() for t in tables}


def mysql_counts(server: LocalMariaDB, database: str, tables: tuple[str, ...]) -> dict[str, int]:
    conn = server.connect()
    with conn, conn.cursor() as cur:
        out = {}
        for t in tables:
            cur.execute(f"SELECT COUNT(*) FROM `{database}`.`{t}`")
            out[t] = int(cur.fetchone()[0])
        return out


def write_json(name: str, doc: dict, env: dict, args: argparse.Namespace) -> Path:
    path = args.out_dir / f"stream_{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    full = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "env": {**env, "loadavg_end": [round(x, 2) for x in os.getloadavg()]}, **doc}
    path.write_text(json.dumps(full, indent=2, default=str) + "\n")
    return path


def parse_mix(text: str) -> tuple[float, float, float]:
    """``80/15/5`` → (0.80, 0.15, 0.05)."""
    parts = [float(x) for x in text.split("/")]
    if len(parts) != 3 or any(p < 0 for p in parts) or not sum(parts):
        raise argparse.ArgumentTypeError("expected I/U/D percentages, e.g. 80/15/5")
    total = sum(parts)
    return parts[0] / total, parts[1] / total, parts[2] / total


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def cpu_snapshot(server: LocalMariaDB) -> dict[str, float]:
    """CPU seconds (user + system) so far of this process, of its reaped children and of mariadbd."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    out = {"self": me.ru_utime + me.ru_stime, "children": kids.ru_utime + kids.ru_stime, "mariadbd": 0.0}
    if server._proc is not None:
        try:
            t = psutil.Process(server._proc.pid).cpu_times()
            out["mariadbd"] = t.user + t.system
        except psutil.Error:
            pass
    return out


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in before}


# --------------------------------------------------------------------------- backlog


@dataclass
class Backlog:
    """N row changes in the binlog between ``start`` and ``end`` (both transaction boundaries)."""

    start: BinlogPosition
    end: BinlogPosition
    tables: tuple[str, ...] = TABLES
    changes: int = 0
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    transactions: int = 0
    seconds: float = 0.0
    mysql_rows: dict[str, int] = field(default_factory=dict)

    @property
    def binlog_bytes(self) -> int:
        return self.end.pos - self.start.pos if self.end.file == self.start.file else -1

    def to_dict(self) -> dict:
        d = asdict(self)
        d["start"], d["end"], d["binlog_bytes"] = str(self.start), str(self.end), self.binlog_bytes
        return d


def backlog_tables(preload: int) -> tuple[str, ...]:
    """The backlog's tables: t1..t3, or t1 alone when it is preloaded (the update-heavy mix)."""
    return TABLES[:1] if preload else TABLES


def create_tables(server: LocalMariaDB, preload: int = 0) -> BinlogPosition:
    """Create the backlog's tables empty; with ``preload``, insert rows 1..preload into t1 (binlogged,
    so a stream from the returned position reads them). Returns the position before the preload."""
    conn = server.connect()
    with conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{DB}` DEFAULT CHARSET utf8mb4")
        for t in backlog_tables(preload):
            cur.execute(DDL.format(db=DB, table=t))
        start = master_position(cur)
        conn.select_db(DB)  # seq_M_to_N (Sequence engine) resolves in the current database
        step = 100_000  # binlogged transactions of a moderate size
        for lo in range(1, preload + 1, step):
            hi = min(lo + step - 1, preload)
            cur.execute(f"INSERT INTO `{DB}`.`{TABLES[0]}` SELECT {VALUES} FROM seq_{lo}_to_{hi}")
        return start


def generate_backlog(server: LocalMariaDB, rows: int, mix: tuple[float, float, float] = MIX,
                     seed: int = 7, preload: int = 0) -> Backlog:
    """Write ``rows`` row changes into the tables :func:`create_tables` made (see the module docstring):
    on the three tables, or with ``preload`` on t1 only, whose ids 1..preload already exist."""
    tables = backlog_tables(preload)
    conn = server.connect()
    with conn, conn.cursor() as cur:
        start = master_position(cur)
        t0 = time.perf_counter()
        conn.autocommit(False)
        rng = random.Random(seed)
        # live ids are [lo, hi): deletes take the oldest, inserts append
        live = {t: [1, preload + 1 if t == TABLES[0] else 1] for t in tables}
        b = Backlog(start, start, tables)
        while b.changes < rows:
            table = rng.choice(tables)
            size = min(rng.randint(*TX_ROWS), max(rows - b.changes, 1))
            lo, hi = live[table]
            r = rng.random()
            if r < mix[0] or hi - lo < 2 * size:
                cur.executemany(INSERT.format(db=DB, table=table), [row_values(i) for i in range(hi, hi + size)])
                n = cur.rowcount
                live[table][1] = hi + size
                b.inserts += n
            elif r < mix[0] + mix[1]:
                first = rng.randint(lo, hi - size)
                n = cur.execute(f"UPDATE `{DB}`.`{table}` SET qty = qty + 1, price = price + 0.01, "
                                "note = CONCAT('upd-', id, '-', qty) WHERE id BETWEEN %s AND %s",
                                (first, first + size - 1))
                b.updates += n
            else:
                n = cur.execute(f"DELETE FROM `{DB}`.`{table}` WHERE id BETWEEN %s AND %s", (lo, lo + size - 1))
                live[table][0] = lo + size
                b.deletes += n
            conn.commit()
            b.changes += n
            b.transactions += 1
        conn.autocommit(True)
        b.seconds = time.perf_counter() - t0
        b.end = master_position(cur)
    b.mysql_rows = mysql_counts(server, DB, tables)
    return b


# --------------------------------------------------------------------------- 1. throughput


def run_raw_reader(server: LocalMariaDB, backlog: Backlog, server_id: int) -> dict:
    """(a) python-mysql-replication alone over (start, end]: decode every row, nothing else."""
    cpu0 = cpu_snapshot(server)
    t0 = time.perf_counter()
    reader = BinLogStreamReader(
        connection_settings={"host": server.host, "port": server.port, "user": server.user,
                             "passwd": server.password},
        server_id=server_id, is_mariadb=False, log_file=backlog.start.file, log_pos=backlog.start.pos,
        resume_stream=True, blocking=True,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent])
    rows = events = 0
    try:
        for event in reader:
            if not isinstance(event, XidEvent):
                events += 1
                for _ in event.rows:
                    rows += 1
            if BinlogPosition(reader.log_file, reader.log_pos) >= backlog.end:
                break
    finally:
        reader.close()
    seconds = time.perf_counter() - t0
    cpu = cpu_delta(cpu0, cpu_snapshot(server))
    if rows != backlog.changes:
        raise AssertionError(f"(a) raw reader saw {rows} row changes, the backlog has {backlog.changes}")
    return {"seconds": seconds, "rows": rows, "row_events": events, "rows_per_s": rows / seconds,
            "cpu_s": {"reader (this process)": cpu["self"], "mariadbd": cpu["mariadbd"]}}


@dataclass(frozen=True)
class BaseLake:
    """A lake the stream brought up to the backlog's start (the update-heavy mix's preloaded
    table): each (b) run resumes from its checkpoint in a copy of it."""

    path: Path
    pipeline: str
    seconds: float


def preload_lake(server: LocalMariaDB, start: BinlogPosition, work: Path, args: argparse.Namespace) -> BaseLake:
    """Stream (start, now] (the preload) into a lake of its own, untimed by the measurement."""
    lake, name = work / "lake-preloaded", "bench_stream_preloaded"
    t0 = time.perf_counter()
    StreamEngine(parse_config(stream_config(server, lake, name, SERVER_ID_STREAM - 1, DB, start, args)),
                 until_now=True).run()
    return BaseLake(lake, name, time.perf_counter() - t0)


def run_engine(server: LocalMariaDB, backlog: Backlog, work: Path, run_id: str, server_id: int,
               args: argparse.Namespace, check: bool = False, base: BaseLake | None = None,
               metrics: bool = False) -> dict:
    """(b) binlake end to end over (start, end], into a fresh sink or a copy of ``base`` (resumed
    from its checkpoint at ``start``); verifies Delta = MySQL."""
    lake = work / f"lake-throughput-{run_id}"
    name = f"bench_stream_{run_id}"
    if base is not None:
        shutil.copytree(base.path, lake)  # before the clock starts
        name = base.pipeline
    raw = stream_config(server, lake, name, server_id, DB, backlog.start, args)
    scraper = None
    if metrics:
        raw["metrics"] = {"port": _free_port()}
        scraper = Scraper(f"http://127.0.0.1:{raw['metrics']['port']}/metrics")
    cfg = parse_config(raw)
    first_commit: list[float] = []
    t0 = time.perf_counter()

    def progress(summary: StreamSummary, offset) -> None:
        if not first_commit and summary.commits:
            first_commit.append(time.perf_counter() - t0)

    engine = StreamEngine(cfg, until_now=True, progress=progress)
    cpu0 = cpu_snapshot(server)
    if scraper is not None:
        scraper.start()
    try:
        summary = engine.run()
    finally:
        if scraper is not None:
            scraper.stop()
    seconds = time.perf_counter() - t0
    cpu = cpu_delta(cpu0, cpu_snapshot(server))
    counts = delta_counts(lake, DB, backlog.tables)
    files = {t: len(DeltaTable(str(lake / DB / t)).file_uris()) for t in backlog.tables}
    if counts != backlog.mysql_rows:
        raise AssertionError(f"(b) binlake: Delta rows {counts} != MySQL rows {backlog.mysql_rows}")
    if summary.changes != backlog.changes:
        raise AssertionError(f"(b) binlake read {summary.changes} changes, the backlog has {backlog.changes}")
    out = {"seconds": seconds, "rows": summary.changes, "rows_per_s": summary.changes / seconds,
           "engine_seconds": summary.seconds, "batches": summary.batches, "table_commits": summary.commits,
           "first_commit_s": first_commit[0] if first_commit else None, "stop_reason": summary.stop_reason,
           "end": str(summary.end), "delta_rows": counts, "delta_files": files,
           "metrics_scrapes": scraper.scrapes if scraper is not None else None,
           "cpu_s": {"engine (this process)": cpu["self"], "reader (forked child)": cpu["children"],
                     "mariadbd": cpu["mariadbd"]}}
    if check:
        out["compare"] = compare_tables(cfg, lake, DB, backlog.tables)
        bad = [d for d in out["compare"].values() if not d["equal"]]
        if bad:
            raise AssertionError(f"(b) binlake: Delta differs from MySQL: {bad}")
    shutil.rmtree(lake, ignore_errors=True)
    return out


def compare_tables(cfg: BinlakeConfig, lake: Path, database: str, tables: tuple[str, ...]) -> dict:
    """Row-by-row comparison (pipelines.reconcile.rows.compare) of each table."""
    out = {}
    with connect(connection_settings(cfg)) as conn, conn.cursor() as cur:
        for t in tables:
            t0 = time.perf_counter()
            diff = compare(cur, describe_table(cur, database, t), str(lake / database / t))
            out[t] = {"equal": diff.equal, "describe": diff.describe(), "seconds": time.perf_counter() - t0}
    return out


def measure_throughput(server: LocalMariaDB, backlog: Backlog, work: Path, env: dict,
                       args: argparse.Namespace, base: BaseLake | None = None) -> dict:
    results: dict[str, list[dict]] = {"a": [], "b": [], **({"m": []} if args.metrics else {})}
    for i in range(args.repeat):
        r = run_raw_reader(server, backlog, SERVER_ID_RAW + i)
        results["a"].append(r)
        print(f"  [{i + 1}/{args.repeat}] (a) python-mysql-replication  {r['seconds']:7.2f} s  "
              f"{r['rows_per_s']:>9,.0f} rows/s", flush=True)
        r = run_engine(server, backlog, work, str(i), SERVER_ID_STREAM + i, args, check=args.compare and i == 0,
                       base=base)
        results["b"].append(r)
        print(f"  [{i + 1}/{args.repeat}] (b) binlake stream → Delta     {r['seconds']:7.2f} s  "
              f"{r['rows_per_s']:>9,.0f} rows/s  ({r['batches']} batches, {r['table_commits']} table commits)",
              flush=True)
        if args.metrics:
            r = run_engine(server, backlog, work, f"{i}m", SERVER_ID_STREAM + 50 + i, args, base=base, metrics=True)
            results["m"].append(r)
            print(f"  [{i + 1}/{args.repeat}] (m) (b) with /metrics scraped  {r['seconds']:7.2f} s  "
                  f"{r['rows_per_s']:>9,.0f} rows/s  ({r['metrics_scrapes']} scrapes)", flush=True)
    stats = {k: {"runs_s": [r["seconds"] for r in v], "median_s": statistics.median(r["seconds"] for r in v),
                 "best_s": min(r["seconds"] for r in v)} for k, v in results.items()}
    n = backlog.changes
    for s in stats.values():
        s["rows_per_s_median"] = n / s["median_s"]
        s["rows_per_s_best"] = n / s["best_s"]
    ratio = stats["b"]["rows_per_s_median"] / stats["a"]["rows_per_s_median"]
    ratio_best = stats["b"]["rows_per_s_best"] / stats["a"]["rows_per_s_best"]

    print()
    mix = "/".join(f"{x * 100:.0f}" for x in args.mix)
    preloaded = f", {DB}.{TABLES[0]} preloaded with {args.preload:,} rows" if args.preload else ""
    print(f"1. Throughput ({mix} insert/update/delete transactions{preloaded}): {n:,} row changes ({backlog.inserts:,} "
          f"inserted, {backlog.updates:,} updated, {backlog.deletes:,} deleted) in {backlog.transactions:,} "
          f"transactions on {len(backlog.tables)} tables, "
          f"{backlog.binlog_bytes / 2**20:,.1f} MiB of binlog, "
          f"{backlog.start} → {backlog.end}; repeat {args.repeat}")
    header = f"  {'run':<52}{'median s':>10}{'best s':>9}{'rows/s (median)':>17}{'rows/s (best)':>15}"
    print(header)
    print("  " + "-" * (len(header) - 2))
    labels = {"a": "(a) python-mysql-replication read loop",
              "b": "(b) binlake StreamEngine(until_now) → Delta",
              "m": "(m) (b) with /metrics, scraped every 1 s"}
    for k in results:
        s = stats[k]
        print(f"  {labels[k]:<52}{s['median_s']:>10.2f}{s['best_s']:>9.2f}{fmt_rate(n, s['median_s']):>17}"
              f"{fmt_rate(n, s['best_s']):>15}")
    if args.repeat > 1:
        print("  runs (s): " + "; ".join(f"{k}: " + ", ".join(f"{x:.2f}" for x in stats[k]["runs_s"])
                                         for k in stats))
    print(f"  (b)/(a) rows/s: median {ratio:.2f}, best {ratio_best:.2f}; target >= {TARGET_RATIO:.2f}: "
          f"{verdict(ratio >= TARGET_RATIO)}")
    cols = ("engine proc", "reader proc", "mariadbd", "busy cores")
    print(f"  {'CPU seconds (user + system), median':<52}" + "".join(f"{c:>13}" for c in cols))
    for k in results:
        runs = results[k]
        cpu = {n: statistics.median(r["cpu_s"][n] for r in runs) for n in runs[0]["cpu_s"]}
        vals = list(cpu.values())
        if k == "a":  # no engine: the reader is this process
            vals = [float("nan"), *vals]
        vals.append(sum(cpu.values()) / stats[k]["median_s"])
        print(f"  {labels[k]:<52}" + "".join(f"{'-' if v != v else f'{v:.1f}':>13}" for v in vals[:3])
              + f"{vals[3]:>13.2f}")
    b0 = results["b"][0]
    first = f"{b0['first_commit_s']:.2f} s" if b0["first_commit_s"] is not None else "-"
    print(f"  (b) run 1: {b0['batches']} batches, {b0['table_commits']} table commits, first commit after {first}; "
          f"Delta rows {b0['delta_rows']} = MySQL rows {backlog.mysql_rows}; Delta files at the end "
          f"{b0['delta_files']}")
    if "compare" in b0:
        print("  row-by-row compare (pipelines.reconcile.rows.compare) after (b) run 1: " + "; ".join(
            f"{d['describe']} ({d['seconds']:.1f} s)" for d in b0["compare"].values()))
    doc = {"backlog": backlog.to_dict(), "results": {k: {**stats[k], "runs": results[k]} for k in results},
           "ratio_b_over_a": {"median": ratio, "best": ratio_best, "target": TARGET_RATIO,
                              "pass": ratio >= TARGET_RATIO}}
    if args.metrics:
        change = stats["m"]["rows_per_s_median"] / stats["b"]["rows_per_s_median"] - 1
        pairs = [m["seconds"] / b["seconds"] - 1 for b, m in zip(results["b"], results["m"])]
        cpu = {k: statistics.median(r["cpu_s"]["engine (this process)"] for r in results[k]) for k in ("b", "m")}
        print(f"  (m) against (b): median rows/s {change * 100:+.1f} %; wall seconds per repeat "
              + ", ".join(f"{x * 100:+.1f} %" for x in pairs) + f"; engine process CPU s (median) {cpu['b']:.2f} → "
              f"{cpu['m']:.2f} ({(cpu['m'] / cpu['b'] - 1) * 100:+.1f} %)")
        doc["metrics_cost"] = {"median_rows_per_s_change": change, "per_repeat_seconds_change": pairs,
                               "engine_cpu_s_median": cpu}
    print(f"  figures written to {write_json('throughput', doc, env, args)}")
    return doc


# --------------------------------------------------------------------------- process-tree memory


class _Background:
    """A daemon thread running ``_run`` until ``stop()``."""

    name = "background"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        raise NotImplementedError


class Scraper(_Background):
    """Reads ``url`` (the stream's /metrics) every second, as Prometheus would; counts the scrapes
    answered (the endpoint is up once the engine starts)."""

    name = "metrics-scraper"

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.scrapes = 0

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                with urllib.request.urlopen(self.url, timeout=5) as r:
                    r.read()
                self.scrapes += 1
            except OSError:
                pass  # not serving yet, or already stopped


class TreeSampler(_Background):
    """Samples RSS (every ``interval``) and PSS (every ``pss_every`` samples) of a process
    and its descendants; keeps the peak of the sums and each process's peak RSS."""

    name = "rss-sampler"

    def __init__(self, pid: int, interval: float = 0.05, pss_every: int = 10):
        self.pid, self.interval, self.pss_every = pid, interval, pss_every
        self.peak_rss_sum = 0
        self.peak_pss_sum = 0
        self.peak_by_pid: dict[int, dict] = {}
        self.samples = 0
        self.max_processes = 0
        super().__init__()

    def _run(self) -> None:
        try:
            root = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        while not self._stop.is_set():
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                return
            rss_sum = pss_sum = 0
            want_pss = self.samples % self.pss_every == 0
            for p in procs:
                try:
                    rss = p.memory_info().rss
                    pss = p.memory_full_info().pss if want_pss else 0
                except psutil.Error:
                    continue
                rss_sum += rss
                pss_sum += pss
                peak = self.peak_by_pid.setdefault(p.pid, {"role": "stream process (binlake CLI)" if p is root
                                                           else "child (binlog reader)", "rss": 0})
                peak["rss"] = max(peak["rss"], rss)
                try:
                    t = p.cpu_times()
                    peak["cpu_s"] = t.user + t.system
                except psutil.Error:
                    pass
            self.samples += 1
            self.max_processes = max(self.max_processes, len(procs))
            self.peak_rss_sum = max(self.peak_rss_sum, rss_sum)
            self.peak_pss_sum = max(self.peak_pss_sum, pss_sum)
            self._stop.wait(self.interval)


def wait_reaping(proc: subprocess.Popen, timeout: float | None = None) -> tuple[int, resource.struct_rusage]:
    """Wait for ``proc`` with wait4: (exit code, its rusage: CPU of the process and its reaped
    descendants; ru_maxrss in KiB of the largest single process among them)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage
        if deadline is not None and time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout or 0)
        time.sleep(0.02)


def tail(path: Path, lines: int = 5) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


# --------------------------------------------------------------------------- 3. memory


def measure_memory(server: LocalMariaDB, backlog: Backlog, work: Path, env: dict, args: argparse.Namespace) -> dict:
    lake = work / "lake-memory"
    cfg_path = work / "memory.yaml"
    write_config_file(cfg_path, stream_config(server, lake, "bench_memory", SERVER_ID_MEMORY, DB,
                                                  backlog.start, args))
    log_path = work / "memory-stream.log"
    cmd = [*binlake_command(), "stream", "-c", str(cfg_path), "--until", "now"]
    t0 = time.perf_counter()
    with open(log_path, "wb") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, cwd=REPO,
                                env={**os.environ, PASSWORD_ENV: server.password})
    sampler = TreeSampler(proc.pid, args.sample_interval).start()
    try:
        code, usage = wait_reaping(proc, timeout=3600)
    finally:
        sampler.stop()
        if proc.returncode is None:
            proc.kill()
            wait_reaping(proc)
    seconds = time.perf_counter() - t0
    maxrss_kib = usage.ru_maxrss
    if code != 0:
        raise RuntimeError(f"binlake stream exited with {code}:\n{tail(log_path, 20)}")
    counts = delta_counts(lake, DB, backlog.tables)
    if counts != backlog.mysql_rows:
        raise AssertionError(f"memory run: Delta rows {counts} != MySQL rows {backlog.mysql_rows}")
    mib = 2**20
    peak_sum_mb = sampler.peak_rss_sum / mib
    per = {pid: {"role": p["role"], "peak_rss_mb": p["rss"] / mib, "cpu_s_last_sample": p.get("cpu_s")}
           for pid, p in sampler.peak_by_pid.items()}
    tree_cpu = usage.ru_utime + usage.ru_stime
    # Sampling can miss a short peak; wait4's ru_maxrss cannot (for the largest process), so
    # the largest process's ru_maxrss plus the other processes' sampled peaks bounds the tree too.
    peaks = sorted((p["rss"] for p in sampler.peak_by_pid.values()), reverse=True)
    bound_mb = max(peak_sum_mb, (maxrss_kib * 1024 + sum(peaks[1:])) / mib)
    doc = {"backlog": backlog.to_dict(), "command": " ".join(cmd[-5:]), "seconds": seconds,
           "rows_per_s": backlog.changes / seconds, "peak_rss_sum_mb": peak_sum_mb,
           "peak_pss_sum_mb": sampler.peak_pss_sum / mib, "wait4_ru_maxrss_mb": maxrss_kib / 1024,
           "per_process": per, "samples": sampler.samples, "sample_interval_s": args.sample_interval,
           "max_processes": sampler.max_processes, "tree_cpu_s": tree_cpu, "delta_rows": counts,
           "cli_output": tail(log_path, 3),
           "peak_bound_mb": bound_mb, "target_mb": TARGET_RSS_MB, "pass": bound_mb < TARGET_RSS_MB}
    print()
    print(f"3. Memory: `binlake stream -c FILE --until now` over the {backlog.changes:,}-change backlog "
          f"({backlog.binlog_bytes / 2**20:,.1f} MiB of binlog), RSS sampled every "
          f"{args.sample_interval * 1000:.0f} ms ({sampler.samples} samples)")
    print(f"  {'what':<60}{'MiB':>10}")
    print("  " + "-" * 70)
    print(f"  {'peak of the summed RSS of the process tree':<60}{peak_sum_mb:>10.0f}")
    print(f"  {'peak of the summed PSS (shared pages split; every ~0.5 s)':<60}{sampler.peak_pss_sum / mib:>10.0f}")
    for pid, p in sorted(per.items()):
        print(f"  {'peak RSS, ' + p['role'] + f' (pid {pid})':<60}{p['peak_rss_mb']:>10.0f}")
    print(f"  {'ru_maxrss from wait4 (largest single process)':<60}{maxrss_kib / 1024:>10.0f}")
    print(f"  {'bound: ru_maxrss + the other processes sampled peaks':<60}{bound_mb:>10.0f}")
    print(f"  target: peak tree RSS (the larger of the sampled sum and the bound) < {TARGET_RSS_MB:.0f} MiB: "
          f"{verdict(bound_mb < TARGET_RSS_MB)}")
    print(f"  the CLI run took {seconds:.2f} s including interpreter start, imports and `validate` checks "
          f"({backlog.changes / seconds:,.0f} rows/s); Delta rows {counts} = MySQL")
    print(f"  CPU: {tree_cpu:.1f} s for the process tree (wait4), of which " + ", ".join(
        f"{p['role'].split(' (')[0]} {p['cpu_s_last_sample'] or 0:.1f} s" for p in per.values())
          + " (last samples)")
    print(f"  figures written to {write_json('memory', doc, env, args)}")
    return doc


# --------------------------------------------------------------------------- 2. latency


class DeltaPoller(_Background):
    """Polls a Delta table and records when each id first became visible (time.time())."""

    name = "delta-poller"

    def __init__(self, uri: str, interval: float):
        self.uri, self.interval = uri, interval
        self.visible: dict[int, float] = {}
        self.version_of: dict[int, tuple[int, bool]] = {}  # id -> (version, seen as a single new version)
        self.polls = 0
        self.poll_seconds: list[float] = []
        self._files: set[str] = set()
        super().__init__()

    def _run(self) -> None:
        table: DeltaTable | None = None
        version = -1
        next_at = time.monotonic()
        while not self._stop.is_set():
            t0 = time.perf_counter()
            try:
                if table is None:
                    table = DeltaTable(self.uri)
                else:
                    table.update_incremental()
            except TableNotFoundError:
                table = None
            if table is not None and table.version() != version:
                now = time.time()
                new_version = table.version()
                single = new_version == version + 1
                files = set(table.file_uris())
                for f in files - self._files:
                    path = f[len("file://"):] if f.startswith("file://") else f
                    for i in pq.read_table(path, columns=["id"]).column(0).to_pylist():
                        if i not in self.visible:
                            self.visible[i] = now
                            self.version_of[i] = (new_version, single)
                self._files = files
                version = new_version
            self.polls += 1
            self.poll_seconds.append(time.perf_counter() - t0)
            next_at += self.interval
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def wait_for(self, ids: Callable[[], list[int]], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(i in self.visible for i in ids()):
                return True
            time.sleep(0.05)
        return False


class PacedWriter:
    """Inserts ``rows_per_tx`` rows per transaction at ``tx_per_s``; commit time per id.

    With ``server_rows`` the server generates each transaction's rows (``INSERT … SELECT`` over
    the Sequence engine, the same values as :func:`row_values`): the writer's own CPU — formatting
    and escaping every value in Python, about a core at 100,000 rows/s — then stays off the two
    cores the server and the stream share, as a production client's would."""

    def __init__(self, server: LocalMariaDB, rows_per_tx: int, tx_per_s: float, server_rows: bool = False):
        self.conn = server.connect()
        self.conn.autocommit(False)
        self.rows_per_tx, self.tx_per_s, self.server_rows = rows_per_tx, tx_per_s, server_rows
        self.sql = INSERT.format(db=LAT_DB, table=LAT_TABLE)
        if server_rows:
            self.conn.select_db(LAT_DB)  # seq_M_to_N (Sequence engine) resolves in the current database
        self.next_id = 1
        self.committed: dict[int, float] = {}
        self.late_tx = 0

    def transaction(self) -> list[int]:
        ids = list(range(self.next_id, self.next_id + self.rows_per_tx))
        self.next_id += self.rows_per_tx
        with self.conn.cursor() as cur:
            if self.server_rows:
                cur.execute(f"INSERT INTO `{LAT_DB}`.`{LAT_TABLE}` ({', '.join(COLUMNS)}) "
                            f"SELECT {VALUES} FROM seq_{ids[0]}_to_{ids[-1]}")
            else:
                cur.executemany(self.sql, [row_values(i) for i in ids])
        self.conn.commit()
        now = time.time()
        for i in ids:
            self.committed[i] = now
        return ids

    def run(self, seconds: float) -> tuple[list[int], float]:
        """Write for ``seconds``; returns the ids written and the wall seconds taken."""
        ids: list[int] = []
        t0 = time.monotonic()
        n = int(seconds * self.tx_per_s)
        for k in range(n):
            delay = t0 + k / self.tx_per_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif delay < -0.1:
                self.late_tx += 1
            ids.extend(self.transaction())
        return ids, time.monotonic() - t0

    def close(self) -> None:
        self.conn.close()


def measure_latency(server: LocalMariaDB, work: Path, env: dict, args: argparse.Namespace) -> dict:
    conn = server.connect()
    with conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{LAT_DB}` DEFAULT CHARSET utf8mb4")
        cur.execute(DDL.format(db=LAT_DB, table=LAT_TABLE))
        start = master_position(cur)
    lake = work / "lake-latency"
    cfg_path = work / "latency.yaml"
    write_config_file(cfg_path, stream_config(server, lake, "bench_latency", SERVER_ID_LATENCY, LAT_DB,
                                                  start, args))
    log_path = work / "latency-stream.log"
    budget = args.latency_seconds + 300
    cmd = [*binlake_command(), "stream", "-c", str(cfg_path), "--max-seconds", str(budget)]
    with open(log_path, "wb") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, cwd=REPO,
                                env={**os.environ, PASSWORD_ENV: server.password})
    sampler = TreeSampler(proc.pid, 0.25, pss_every=1_000_000).start()
    poller = DeltaPoller(str(lake / LAT_DB / LAT_TABLE), args.poll_interval).start()
    writer = PacedWriter(server, args.rows_per_tx, args.tx_per_s, args.server_rows)
    try:
        t0 = time.perf_counter()
        warm = writer.transaction()
        if not poller.wait_for(lambda: warm, 120):
            raise RuntimeError(f"warm-up rows not visible after 120 s:\n{tail(log_path, 20)}")
        warmup_s = time.perf_counter() - t0
        print(f"  stream up (warm-up transaction visible after {warmup_s:.2f} s); writing "
              f"{args.rows_per_tx * args.tx_per_s:,.0f} rows/s for {args.latency_seconds:.0f} s ...", flush=True)
        ids, write_s = writer.run(args.latency_seconds)
        all_visible = poller.wait_for(lambda: ids, 60)
        drain_s = time.perf_counter() - t0 - warmup_s - write_s
    finally:
        poller.stop()
        writer.close()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        sampler.stop()
    if code != 0:
        raise RuntimeError(f"binlake stream exited with {code}:\n{tail(log_path, 20)}")
    missing = [i for i in ids if i not in poller.visible]
    lat = sorted(poller.visible[i] - writer.committed[i] for i in ids if i in poller.visible)
    history = {h["version"]: h["timestamp"] / 1000 for h in DeltaTable(str(lake / LAT_DB / LAT_TABLE)).history()}
    engine_part, poll_part = [], []
    for i in ids:
        v = poller.version_of.get(i)
        if v and v[1] and v[0] in history:
            engine_part.append(history[v[0]] - writer.committed[i])
            poll_part.append(poller.visible[i] - history[v[0]])
    engine_part.sort()
    poll_part.sort()
    polls = sorted(poller.poll_seconds)

    def dist(values: list[float]) -> dict:
        return {"n": len(values), "p50": percentile(values, 50), "p95": percentile(values, 95),
                "p99": percentile(values, 99), "max": values[-1] if values else float("nan"),
                "mean": statistics.fmean(values) if values else float("nan")}

    d = dist(lat)
    ok = d["p50"] <= TARGET_P50_S and d["p99"] <= TARGET_P99_S and not missing
    doc = {"rows": len(ids), "write_seconds": write_s, "achieved_rows_per_s": len(ids) / write_s,
           "late_transactions": writer.late_tx, "server_rows": args.server_rows, "warmup_s": warmup_s,
           "drain_s": drain_s,
           "all_visible": all_visible, "missing": len(missing), "latency_s": d,
           "mysql_commit_to_delta_commit_s": dist(engine_part), "delta_commit_to_seen_s": dist(poll_part),
           "poll_interval_s": args.poll_interval, "polls": poller.polls, "poll_p50_s": percentile(polls, 50),
           "poll_max_s": polls[-1] if polls else None, "delta_versions": max(history) if history else 0,
           "engine_peak_rss_sum_mb": sampler.peak_rss_sum / 2**20, "cli_output": tail(log_path, 3),
           "targets": {"p50_s": TARGET_P50_S, "p99_s": TARGET_P99_S}, "pass": ok}
    print()
    print(f"2. Latency: {len(ids):,} rows inserted in {write_s:.1f} s ({len(ids) / write_s:,.0f} rows/s, "
          f"{args.rows_per_tx} rows x {args.tx_per_s:.0f} tx/s, {writer.late_tx} transactions >100 ms late"
          f"{', rows generated by the server' if args.server_rows else ''}); "
          f"`binlake stream` subprocess, poller every {args.poll_interval * 1000:.0f} ms")
    header = f"  {'seconds':<44}{'p50':>8}{'p95':>8}{'p99':>8}{'max':>8}{'mean':>8}{'rows':>9}"
    print(header)
    print("  " + "-" * (len(header) - 2))
    for label, x in (("MySQL COMMIT → visible to a Delta reader", d),
                     ("  MySQL COMMIT → Delta commit timestamp", doc["mysql_commit_to_delta_commit_s"]),
                     ("  Delta commit timestamp → seen by poller", doc["delta_commit_to_seen_s"])):
        print(f"  {label:<44}{x['p50']:>8.3f}{x['p95']:>8.3f}{x['p99']:>8.3f}{x['max']:>8.3f}{x['mean']:>8.3f}"
              f"{x['n']:>9,}")
    print(f"  targets p50 <= {TARGET_P50_S} s, p99 <= {TARGET_P99_S} s, every row visible: {verdict(ok)}"
          + (f" ({len(missing)} rows never seen)" if missing else ""))
    print(f"  {doc['delta_versions']} Delta versions; poll p50 {doc['poll_p50_s'] * 1000:.0f} ms, "
          f"max {doc['poll_max_s'] * 1000:.0f} ms; engine tree peak RSS {doc['engine_peak_rss_sum_mb']:.0f} MiB; "
          "the split rows are those whose poll saw exactly one new version (commit timestamps are ms)")
    print(f"  figures written to {write_json('latency', doc, env, args)}")
    return doc


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="row changes in the backlog (throughput, memory)")
    ap.add_argument("--repeat", type=int, default=1, help="run (a) and (b) this many times, alternating")
    ap.add_argument("--latency-seconds", type=float, default=60.0, help="duration of the steady write load")
    ap.add_argument("--only", choices=("throughput", "latency", "memory"), action="append",
                    help="run only this measurement (repeatable); default: all three")
    ap.add_argument("--mix", type=parse_mix, default=MIX, metavar="I/U/D",
                    help="backlog: percent of transactions that insert/update/delete (default 80/15/5; "
                         "100/0/0 = inserts only, no MERGE)")
    ap.add_argument("--compare", action="store_true",
                    help="row-by-row Delta/MySQL comparison (pipelines.reconcile.rows) after the first (b) run")
    ap.add_argument("--rows-per-tx", type=int, default=20, help="latency writer: rows per transaction")
    ap.add_argument("--tx-per-s", type=float, default=100.0, help="latency writer: transactions per second")
    ap.add_argument("--server-rows", action="store_true",
                    help="latency writer: the server generates the rows (INSERT … SELECT), no client-side values")
    ap.add_argument("--poll-interval", type=float, default=0.05, help="latency poller interval (s)")
    ap.add_argument("--sample-interval", type=float, default=0.05, help="memory: RSS sampling interval (s)")
    ap.add_argument("--max-batch-rows", type=int, help="stream.max_batch_rows (default: the config default)")
    ap.add_argument("--max-batch-seconds", type=float, help="stream.max_batch_seconds (default: config default)")
    ap.add_argument("--catchup-batch-rows", type=int,
                    help="stream.catchup_batch_rows, the batch size while reading a backlog, as throughput does "
                         "(default: the config default; raised to --max-batch-rows when below it)")
    ap.add_argument("--metrics", action="store_true",
                    help="throughput (b): serve the Prometheus endpoint and scrape it every second")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--out-dir", type=Path, default=OUT_DIR)
    ap.add_argument("--preload", type=int, default=0, metavar="N",
                    help="update-heavy mix: bench.t1 holds ids 1..N in MySQL and in Delta before the backlog, "
                         "which then writes to t1 only (e.g. --preload 1000000 --mix 0/100/0); throughput only")
    args = ap.parse_args(argv)
    compile_product()  # whole processes start as an installed copy does (bench/bytecode.py)
    only = set(args.only or ("throughput", "latency", "memory"))
    if args.preload and "memory" in only:
        ap.error("--preload measures throughput only (add --only throughput)")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    env = {"nproc": os.cpu_count(), "cpu": platform.processor() or platform.machine(),
           "loadavg_start": [round(x, 2) for x in os.getloadavg()],
           "started_at": dt.datetime.now(dt.UTC).isoformat()}
    print(f"machine: nproc {env['nproc']}, load average {env['loadavg_start']}")
    work = Path(tempfile.mkdtemp(prefix="binlake-stream-bench-"))
    server = LocalMariaDB(server_id=1)
    passed = []
    try:
        server.start()
        print(f"MariaDB on port {server.port}", flush=True)
        backlog = base = None
        if only & {"throughput", "memory"}:
            start = create_tables(server, args.preload)
            if args.preload:
                print(f"preloaded {args.preload:,} rows into {DB}.{TABLES[0]}; streaming them into a base lake ...",
                      flush=True)
                base = preload_lake(server, start, work, args)
                print(f"  streamed in {base.seconds:.1f} s (untimed; each (b) run resumes from a copy)", flush=True)
            print(f"generating {args.rows:,} row changes ...", flush=True)
            backlog = generate_backlog(server, args.rows, args.mix, preload=args.preload)
            print(f"  {backlog.changes:,} changes in {backlog.transactions:,} transactions in "
                  f"{backlog.seconds:.1f} s ({backlog.binlog_bytes / 2**20:,.1f} MiB of binlog)", flush=True)
        # Order matters: throughput and memory read (start, end] with --until now, so nothing
        # may be written after the backlog until both are done; the latency load comes last.
        if "throughput" in only:
            passed.append(measure_throughput(server, backlog, work, env, args, base)["ratio_b_over_a"]["pass"])
        if "memory" in only:
            passed.append(measure_memory(server, backlog, work, env, args)["pass"])
        if "latency" in only:
            print()
            print("latency: starting `binlake stream` ...", flush=True)
            passed.append(measure_latency(server, work, env, args)["pass"])
        return 1 if args.strict and not all(passed) else 0
    finally:
        server.cleanup()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
