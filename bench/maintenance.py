"""Lake maintenance benchmark: what a table looks like after streaming for a while with and
without binlake's maintenance (pipelines/lake/maintenance/), what reading it then costs, the
stream's latency while compactions run, and its memory over uptime.

    .venv/bin/python bench/maintenance.py [--only layout|stream|latency|rss|vacuum] [--rows N] [--seconds S]
                                          [--idle-seconds S] [--tx-per-s N] [--rss-seconds S]
                                          [--vacuum-files N] [--vacuum-file-rows N]

One run starts a throwaway MariaDB (devtools.local_mariadb, server_id 1).

1. ``layout`` (how the small-table cap of policy.py was chosen): the table of ``--rows`` rows
   (bench/snapshot.py's 7 columns) written as 1, 2, 4, 8, 16, 32, 64 files cut in key order;
   for each: a full read (delta-rs ``to_pyarrow_table``; DuckDB's ``delta_scan``), a one-key
   copy-on-write batch (pipelines/lake/apply.py) and a batch of 50 random keys, medians.
2. ``stream``: ``bench.t`` with ``--rows`` rows (default 200,000) is snapshotted (``binlake
   snapshot``, local runner), then ``binlake stream`` runs with the default settings while a
   writer commits ``--tx-per-s`` small transactions a second (each: 1-3 new rows, 1-3 rows of
   random keys updated, or one random row deleted; 40/45/15) for ``--seconds``, then the table is
   left idle for ``--idle-seconds`` (default: one maintenance interval and 30 s) and the stream
   stopped. Twice, each on its own lake: ``sink.maintenance.auto: false`` (the baseline: nothing
   compacts or deletes) and with maintenance (``retention_hours: 0``: the retention has passed
   once the table is idle). Reported per run: Delta versions, live files, Parquet files and
   bytes on disk, live bytes, ``_delta_log`` files; the live files of one ``optimize.compact()``
   of the same rows; a full read with delta-rs and with DuckDB against that compacted copy
   (median of 5, alternating); the stream's RSS (process and reader) over time; Delta = MySQL
   row by row. Goals: live files ≤ 4 × compact + 8, bytes on disk ≤ 2 × live, reads ≤ 1.5 × the
   compacted copy.
3. ``latency``: bench/stream.py's latency measurement (2,000 rows/s: 20-row inserts at 100
   transactions/s, a poller reading Delta every 50 ms) with default maintenance: each batch
   adds a small file, so compactions run throughout; reported: the latency distribution of all
   rows and of the rows committed while a compaction was being rewritten or committed. Goal:
   p99 ≤ 1.5 s.
4. ``rss``: the maintained stream of 2. for ``--rss-seconds`` (default 3,600), then 10 s for it
   to read the last changes (not the idle part); the stream's RSS at 5 minutes and at the end of
   the writes. Goal: within 1.2 ×. The RSS (the stream process's, its reader's) is printed every
   5 minutes as it goes; the stream runs with its memory probe (pipelines/stream/memory_probe.py,
   one look a minute: what grows), whose records go to the figures' ``memory_probe``.
5. ``vacuum``: two tables of ``--vacuum-files`` files (default 2,500, as the one-hour run's
   vacuums met; each a copy of one file of ``--vacuum-file-rows`` rows), every file removed by a
   second commit; one vacuumed as the stream did before (delta-rs's vacuum, its checkpoint and
   log cleanup, all in the stream's thread: the baseline, its time the stream's pause), the other
   as it does now (vacuum.py: the plan in the stream's thread, the sweep in a worker). Reported:
   the stream's pause then and now, the sweep's time. Goal: the pause ≤ 0.1 × the baseline's.

**Excludes**: schema changes, backfills and object stores (the figures are a local folder's);
a real store adds requests per compaction and vacuum (docs/maintenance.md states them).
Figures go to bench/out/maintenance_*.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import glob
import importlib.util
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import pyarrow as pa  # noqa: E402
import yaml  # noqa: E402
from deltalake import DeltaTable, write_deltalake  # noqa: E402

from bench.snapshot import DDL, VALUES  # noqa: E402
from bench.stream import binlake_command, measure_latency, tail  # noqa: E402
from cdc_core.config import parse_config  # noqa: E402
from cdc_core.offset.position import BinlogPosition  # noqa: E402
from cdc_core.source.connection import connect, connection_settings  # noqa: E402
from devtools.local_mariadb import LocalMariaDB  # noqa: E402
from pipelines.lake.control_store import ControlStore  # noqa: E402
from pipelines.reconcile.rows import compare_table  # noqa: E402

OUT_DIR = REPO / "bench" / "out"
DB, TABLE = "bench", "t"
PASSWORD_ENV = "BINLAKE_BENCH_PASSWORD"
SERVER_IDS = {"baseline": 6500, "maintained": 6520, "rss": 6540}
GOAL_FILES_FACTOR, GOAL_FILES_PLUS, GOAL_DISK, GOAL_READ, GOAL_P99, GOAL_RSS = 4, 8, 2.0, 1.5, 1.5, 1.2
GOAL_VACUUM_PAUSE = 0.1
# rss: the stream runs this long after the writes before it is stopped and Delta compared with
# MySQL (stopped at once, a stream a fraction of a second behind left its last changes unread).
RSS_DRAIN_SECONDS = 10.0


def dump(name: str, doc: dict, args: argparse.Namespace) -> Path:
    path = args.out_dir / f"maintenance_{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"at": dt.datetime.now(dt.UTC).isoformat(), "nproc": os.cpu_count(),
           "loadavg": [round(x, 2) for x in os.getloadavg()], **doc}
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return path


def median_seconds(fn, n: int = 5) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def duckdb_reader():
    """A function reading a whole Delta table with DuckDB's delta extension, loaded from the file the
    ``duckdb-ext-delta`` package ships (unsigned, hence ``allow_unsigned_extensions``)."""
    import duckdb

    spec = importlib.util.find_spec("duckdb_ext")
    if spec is None:
        raise SystemExit("bench/maintenance.py needs duckdb==1.4.4 and duckdb-ext-delta (pip install -e '.[dev]')")
    ext = glob.glob(os.path.join(list(spec.submodule_search_locations)[0], "extensions", "*", "*",
                                 "delta.duckdb_extension"))[0]
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{ext}'")
    return lambda uri: con.execute(f"SELECT * FROM delta_scan('{uri}')").fetch_arrow_table()


def read_times(uri: str, reference: str, duck) -> dict:
    """Full reads of ``uri`` and of ``reference`` (the compacted copy), alternating, medians of 5."""
    out: dict[str, list[float]] = {k: [] for k in ("delta_rs", "delta_rs_compacted", "duckdb", "duckdb_compacted")}
    for _ in range(5):
        for key, fn in (("delta_rs", lambda: DeltaTable(uri).to_pyarrow_table()),
                        ("delta_rs_compacted", lambda: DeltaTable(reference).to_pyarrow_table()),
                        ("duckdb", lambda: duck(uri)), ("duckdb_compacted", lambda: duck(reference))):
            t0 = time.perf_counter()
            fn()
            out[key].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in out.items()}
    return {**med, "delta_rs_ratio": med["delta_rs"] / med["delta_rs_compacted"],
            "duckdb_ratio": med["duckdb"] / med["duckdb_compacted"]}


# --------------------------------------------------------------------------- 1. layout


def rows_table(n: int) -> pa.Table:
    """``n`` rows of the benchmark's 7 columns (as MariaDB generates them), with ``_cdc_op`` and ``_cdc_seq``."""
    ids = np.arange(1, n + 1, dtype=np.int64)
    return pa.table({
        "id": ids, "qty": (ids % 100000).astype(np.int32), "name": pa.array([f"user-{i}" for i in ids]),
        "price": pa.array((ids % 10_000_000) / 100.0), "created_at": pa.array(
            (np.datetime64("2020-01-01T00:00:00") + ids.astype("timedelta64[s]")).astype("datetime64[us]")),
        "score": pa.array(np.where(ids % 10 == 0, np.nan, ids / 7.0)), "note": pa.array([f"{i:032x}" for i in ids]),
        "_cdc_op": pa.array(["r"] * n), "_cdc_seq": pa.array(np.zeros(n, dtype=np.int64))})


def measure_layout(work: Path, args: argparse.Namespace) -> dict:
    from cdc_core.offset.stream_offset import StreamOffset
    from pipelines.lake.apply import apply_changes
    from pipelines.lake.files import commit_files, write_parquet
    from pipelines.lake.offsets import stream_commit_properties
    from pipelines.lake.tables import ensure_table

    duck = duckdb_reader()
    rows = rows_table(args.rows)
    rng = random.Random(7)
    results = []
    print(f"1. Layout: {args.rows:,} rows cut into N files in key order")
    print(f"  {'files':>6}{'file MiB':>10}{'read delta-rs':>15}{'read DuckDB':>13}{'1-key batch':>13}"
          f"{'50-key batch':>14}{'50-key rewrites MiB':>21}")
    for n in (1, 2, 4, 8, 16, 32, 64):
        uri = str(work / f"layout-{n}")
        dt_ = ensure_table(uri, rows.schema)
        step = -(-rows.num_rows // n)
        commit_files(dt_, [write_parquet(uri, rows.slice(i, step)) for i in range(0, rows.num_rows, step)],
                     rows.schema, {})
        size = sum(pa.table(dt_.get_add_actions(flatten=False)).column("size_bytes").to_pylist()) / n / 2**20
        read = median_seconds(lambda u=uri: DeltaTable(u).to_pyarrow_table())
        read_duck = median_seconds(lambda u=uri: duck(u))
        batch: dict[int, list[float]] = {1: [], 50: []}
        rewrote = []
        seq = 1
        for keys in (1, 50) * 5:
            picked = sorted(rng.sample(range(1, args.rows + 1), keys))
            upsert = rows.take(pa.array([k - 1 for k in picked])).set_column(
                7, "_cdc_op", pa.array(["u"] * keys)).set_column(8, "_cdc_seq", pa.array([seq] * keys, pa.int64()))
            pos = BinlogPosition("binlog.000001", 4 + seq)
            before = set(pa.table(dt_.get_add_actions(flatten=False)).column("path").to_pylist())
            t0 = time.perf_counter()
            apply_changes(dt_, ("id",), rows.schema.empty_table(), upsert, rows.schema.empty_table(),
                          stream_commit_properties("bench", StreamOffset(pos, pos)), uri)
            batch[keys].append(time.perf_counter() - t0)
            if keys == 50:  # the bytes of the files the batch wrote
                added = pa.table(dt_.get_add_actions(flatten=False))
                rewrote.append(sum(s for p, s in zip(added.column("path").to_pylist(),
                                                     added.column("size_bytes").to_pylist()) if p not in before))
            seq += 1
        r = {"files": n, "file_mib": size, "read_delta_rs_s": read, "read_duckdb_s": read_duck,
             "one_key_batch_s": statistics.median(batch[1]), "fifty_key_batch_s": statistics.median(batch[50]),
             "fifty_key_rewrites_mib": statistics.median(rewrote) / 2**20}
        results.append(r)
        print(f"  {n:>6}{size:>10.2f}{read:>15.3f}{read_duck:>13.3f}{r['one_key_batch_s']:>13.3f}"
              f"{r['fifty_key_batch_s']:>14.3f}{r['fifty_key_rewrites_mib']:>21.2f}")
    doc = {"rows": args.rows, "layouts": results}
    print(f"  figures written to {dump('layout', doc, args)}")
    return doc


# --------------------------------------------------------------------------- 2. stream


class Sampler:
    """The RSS of a process and its descendants, every ``every`` seconds: (seconds since start, bytes)."""

    def __init__(self, pid: int, every: float = 5.0, say_every: float | None = None):
        import threading

        self.pid, self.every, self.say_every = pid, every, say_every
        self.samples: list[tuple[float, int]] = []
        self.main: list[tuple[float, int]] = []  # the process alone (its children: the binlog reader)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        t0 = time.monotonic()
        root = psutil.Process(self.pid)
        said = 0
        while not self._stop.is_set():
            try:
                procs = [root, *root.children(recursive=True)]
                t, own = time.monotonic() - t0, root.memory_info().rss
                self.samples.append((t, own + sum(p.memory_info().rss for p in procs[1:])))
                self.main.append((t, own))
            except psutil.Error:
                return
            if self.say_every and t >= (said + 1) * self.say_every:
                said = int(t // self.say_every)
                print(f"    RSS at {t / 60:.0f} min: {self.samples[-1][1] / 2**20:.0f} MiB (the stream process "
                      f"{own / 2**20:.0f} MiB, its reader {(self.samples[-1][1] - own) / 2**20:.0f} MiB); load "
                      f"{os.getloadavg()[0]:.2f}", flush=True)
            self._stop.wait(self.every)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def at(self, seconds: float, window: float = 30.0) -> float | None:
        """The median RSS (MiB) of the samples within ``window`` seconds of ``seconds``."""
        near = [rss for t, rss in self.samples if abs(t - seconds) <= window / 2]
        return statistics.median(near) / 2**20 if near else None


class SmallTransactions:
    """Small transactions at a steady rate: 1-3 new rows, 1-3 random rows updated, or one random
    row deleted (40/45/15)."""

    def __init__(self, server: LocalMariaDB, first_new: int, seed: int):
        self.conn = server.connect(DB)
        self.conn.autocommit(False)
        self.rng = random.Random(seed)
        self.next_id = first_new
        self.counts = {"insert": 0, "update": 0, "delete": 0, "late": 0}

    def one(self, cur) -> None:
        r = self.rng.random()
        if r < 0.40:
            n = self.rng.randint(1, 3)
            cur.execute(f"INSERT INTO `{TABLE}` SELECT {VALUES} FROM seq_{self.next_id}_to_{self.next_id + n - 1}")
            self.next_id += n
            self.counts["insert"] += 1
        elif r < 0.85:
            ids = [self.rng.randint(1, self.next_id - 1) for _ in range(self.rng.randint(1, 3))]
            cur.execute(f"UPDATE `{TABLE}` SET qty = qty + 1, score = RAND() WHERE id IN ({','.join(map(str, ids))})")
            self.counts["update"] += 1
        else:
            cur.execute(f"DELETE FROM `{TABLE}` WHERE id = %s", (self.rng.randint(1, self.next_id - 1),))
            self.counts["delete"] += 1
        self.conn.commit()

    def run(self, seconds: float, per_second: float) -> None:
        t0 = time.monotonic()
        with self.conn.cursor() as cur:
            for k in range(int(seconds * per_second)):
                delay = t0 + k / per_second - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                elif delay < -0.5:
                    self.counts["late"] += 1
                self.one(cur)


def config(server: LocalMariaDB, lake: Path, mode: str, args: argparse.Namespace) -> dict:
    sink: dict = {"path": str(lake)}
    if mode == "baseline":
        sink["maintenance"] = {"auto": False}
    else:
        sink["maintenance"] = {"retention_hours": 0, **({"interval_minutes": args.interval_minutes}
                                                          if args.interval_minutes else {})}
    return {"pipeline": {"name": f"bench_{mode}"},
            "source": {"host": server.host, "port": server.port, "user": server.user,
                       "password": "${" + PASSWORD_ENV + "}", "server_id": SERVER_IDS[mode],
                       "tables": [rf"{DB}\.{TABLE}"], "snapshot": {"runner": "local"}},
            "sink": sink}


def disk(uri: Path) -> dict:
    """Parquet files and bytes under a table's folder, and its log's files."""
    parquet = [p for p in uri.rglob("*.parquet") if "_delta_log" not in p.parts]
    log = list((uri / "_delta_log").iterdir())
    return {"parquet_files": len(parquet), "parquet_bytes": sum(p.stat().st_size for p in parquet),
            "log_files": len(log), "log_bytes": sum(p.stat().st_size for p in log)}


def compacted_copy(uri: str, work: Path, name: str) -> tuple[str, int]:
    """The table's rows written into a new table and compacted once (``optimize.compact()``): its
    path and live files."""
    ref = str(work / f"compacted-{name}")
    write_deltalake(ref, DeltaTable(uri).to_pyarrow_table())
    t = DeltaTable(ref)
    t.optimize.compact()
    t.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    return ref, len(DeltaTable(ref).file_uris())


def run_stream(server: LocalMariaDB, work: Path, mode: str, seconds: float, idle: float, args: argparse.Namespace,
               duck) -> dict:
    lake = work / f"lake-{mode}"
    cfg_raw = config(server, lake, mode, args)
    path = work / f"{mode}.yaml"
    path.write_text(yaml.safe_dump(cfg_raw, sort_keys=False))
    env = {**os.environ, PASSWORD_ENV: server.password}
    if mode == "rss":  # the stream logs a look at its memory every minute (pipelines/stream/memory_probe.py)
        env.setdefault("BINLAKE_MEMORY_PROBE_SECONDS", "60")
    snap = subprocess.run([*binlake_command(), "snapshot", "-c", str(path)], cwd=REPO, env=env,
                          capture_output=True, text=True)
    if snap.returncode != 0:
        raise RuntimeError(f"binlake snapshot failed: {snap.stdout}\n{snap.stderr}")
    uri = lake / DB / TABLE
    after_snapshot = {"live_files": len(DeltaTable(str(uri)).file_uris()), **disk(uri)}
    log_path = work / f"{mode}-stream.log"
    with open(log_path, "wb") as logf:
        proc = subprocess.Popen([*binlake_command(), "stream", "-c", str(path)], stdout=logf, stderr=subprocess.STDOUT,
                                cwd=REPO, env=env)
    sampler = Sampler(proc.pid, say_every=300.0 if mode == "rss" else None)
    with server.connect(DB) as c, c.cursor() as cur:
        cur.execute(f"SELECT MAX(id) FROM `{TABLE}`")
        first_new = int(cur.fetchone()[0]) + 1 + SERVER_IDS[mode] * 1000
    writer = SmallTransactions(server, first_new, SERVER_IDS[mode])
    t0 = time.monotonic()
    try:
        print(f"  {mode}: streaming {args.tx_per_s:.0f} small transactions/s for {seconds:.0f} s, then idle "
              f"{idle:.0f} s ...", flush=True)
        writer.run(seconds, args.tx_per_s)
        streamed = time.monotonic() - t0
        time.sleep(idle)
    finally:
        writer.conn.close()
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(300)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        sampler.stop()
    if code != 0:
        raise RuntimeError(f"binlake stream exited {code}:\n{tail(log_path, 20)}")
    cfg = parse_config({**cfg_raw, "source": {**cfg_raw["source"], "password": server.password}})
    with connect(connection_settings(cfg)) as conn, conn.cursor() as cur:
        diff = compare_table(cur, cfg, f"{DB}.{TABLE}")
    table = DeltaTable(str(uri))
    live = sum(pa.table(table.get_add_actions(flatten=False)).column("size_bytes").to_pylist())
    ref, ref_files = compacted_copy(str(uri), work, mode)
    reads = read_times(str(uri), ref, duck)
    on_disk = disk(uri)
    runs = ControlStore.of(cfg).latest_maintenance() if mode != "baseline" else {}
    compactions = sum(1 for _ in ControlStore.of(cfg)._read("maintenance_runs")  # noqa: SLF001
                      if _["kind"] == "compaction" and _["table"] == f"{DB}.{TABLE}") if mode != "baseline" else 0
    rss = {f"{int(t // 60)} min": sampler.at(t) for t in (60, 300, 600, 1800, 3600) if t <= streamed}
    rss["end of writes"] = sampler.at(streamed)
    doc = {"mode": mode, "seconds": streamed, "idle_seconds": idle, "transactions": writer.counts,
           "after_snapshot": after_snapshot, "versions": table.version(), "live_files": len(table.file_uris()),
           "live_bytes": live, **on_disk, "disk_over_live": on_disk["parquet_bytes"] / live,
           "compacted_copy_files": ref_files, "files_goal": GOAL_FILES_FACTOR * ref_files + GOAL_FILES_PLUS,
           "reads": reads, "rss_mib": rss, "rss_series": sampler.samples[::12], "stream_rss_series": sampler.main[::12],
           "memory_probe": [json.loads(line.split("memory probe: ", 1)[1]) for line in
                            log_path.read_text(errors="replace").splitlines() if "memory probe: " in line],
           "delta_equals_mysql": diff.equal, "rows": diff.delta_rows, "compactions": compactions,
           "last_runs": {f"{k[1]}": v for k, v in runs.items() if k[0] == f"{DB}.{TABLE}"}}
    print(f"    {table.version()} Delta versions, {doc['live_files']} live files (a compacted copy: {ref_files}), "
          f"{on_disk['parquet_files']:,} Parquet files and {on_disk['parquet_bytes'] / 2**20:,.1f} MiB on disk for "
          f"{live / 2**20:.1f} MiB live ({doc['disk_over_live']:.1f}×), {on_disk['log_files']} log files; "
          f"reads {reads['delta_rs_ratio']:.2f}× (delta-rs), {reads['duckdb_ratio']:.2f}× (DuckDB) the compacted "
          f"copy's; RSS {', '.join(f'{k} {v:.0f} MiB' for k, v in rss.items() if v)}; {compactions} compactions; "
          f"Delta = MySQL row by row: {diff.equal} ({diff.delta_rows:,} rows)", flush=True)
    return doc


def measure_stream(server: LocalMariaDB, work: Path, args: argparse.Namespace) -> dict:
    duck = duckdb_reader()
    print(f"2. Stream: {args.rows:,} rows, {args.tx_per_s:.0f} small transactions/s for {args.seconds:.0f} s, "
          f"idle {args.idle_seconds:.0f} s")
    runs = {mode: run_stream(server, work, mode, args.seconds, args.idle_seconds, args, duck)
            for mode in ("baseline", "maintained")}
    m = runs["maintained"]
    goals = {"live_files": m["live_files"] <= m["files_goal"], "disk": m["disk_over_live"] <= GOAL_DISK,
             "read_delta_rs": m["reads"]["delta_rs_ratio"] <= GOAL_READ,
             "read_duckdb": m["reads"]["duckdb_ratio"] <= GOAL_READ, "equal": m["delta_equals_mysql"]}
    doc = {"rows": args.rows, "runs": runs, "goals": goals}
    print(f"  goals with maintenance: {goals}")
    print(f"  figures written to {dump('stream', doc, args)}")
    return doc


# --------------------------------------------------------------------------- 3. latency


def measure_compaction_latency(server: LocalMariaDB, work: Path, args: argparse.Namespace) -> dict:
    from bench.stream import LAT_DB, LAT_TABLE

    print("3. Latency at 2,000 rows/s without maintenance (the baseline), then with default maintenance "
          "(compactions while it runs)")
    docs = {}
    for mode, maintenance in (("baseline", {"auto": False}), ("maintained", None)):
        ns = argparse.Namespace(latency_seconds=args.latency_seconds, poll_interval=0.05, rows_per_tx=20,
                                tx_per_s=100.0, max_batch_rows=None, max_batch_seconds=None,
                                catchup_batch_rows=None, maintenance=maintenance, out_dir=args.out_dir)
        conn = server.connect()
        with conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{LAT_DB}`")  # each run inserts ids from 1
        run_dir = work / f"latency-{mode}"
        run_dir.mkdir()
        doc = measure_latency(server, run_dir, {"nproc": os.cpu_count()}, ns)
        store = ControlStore(str(run_dir / "lake-latency"), "bench_latency")
        doc["compactions"] = sum(1 for r in store._read("maintenance_runs")  # noqa: SLF001
                                 if r["kind"] == "compaction" and r["table"] == f"{LAT_DB}.{LAT_TABLE}")
        print(f"  {mode}: {doc['compactions']} compactions of {LAT_DB}.{LAT_TABLE} during the run; p99 of every "
              f"row {doc['latency_s']['p99']:.3f} s (goal ≤ {GOAL_P99} s with maintenance)", flush=True)
        docs[mode] = doc
    print(f"  figures written to {dump('latency', docs, args)}")
    return docs


# --------------------------------------------------------------------------- main


# --------------------------------------------------------------------------- 5. vacuum


def removed_files_table(uri: str, files: int, rows_per_file: int) -> int:
    """A table at ``uri`` of ``files`` copies of one file of ``rows_per_file`` rows, all removed by
    its second commit (what an interval of copy-on-write leaves a vacuum); their bytes."""
    from pipelines.lake.files import commit_files, write_parquet
    from pipelines.lake.tables import ensure_table

    rows = rows_table(rows_per_file)
    dt = ensure_table(uri, rows.schema)
    first = write_parquet(uri, rows, kind="bench")
    copies = [first]
    for i in range(1, files):
        path = first.path.replace(".parquet", f"-{i}.parquet")
        shutil.copyfile(Path(uri) / first.path, Path(uri) / path)
        copies.append(dataclasses.replace(first, path=path))
    commit_files(dt, copies, rows.schema, {})
    dt.update_incremental()
    dt.delete()  # no predicate: one commit removing every file
    return first.size * files


def measure_vacuum(work: Path, args: argparse.Namespace) -> dict:
    from pipelines.lake.maintenance import vacuum

    print(f"5. Vacuum of {args.vacuum_files:,} removed files: the stream's pause before (delta-rs's vacuum in its "
          f"thread) and now (vacuum.py's plan in its thread, the sweep in a worker)")
    before_uri, now_uri = str(work / "vacuum-before"), str(work / "vacuum-now")
    size = removed_files_table(before_uri, args.vacuum_files, args.vacuum_file_rows)
    removed_files_table(now_uri, args.vacuum_files, args.vacuum_file_rows)
    dt = DeltaTable(now_uri)
    t0 = time.perf_counter()
    planned = vacuum.plan(dt, f"{DB}.{TABLE}", now_uri, None, 0)
    pause = time.perf_counter() - t0
    t0 = time.perf_counter()
    swept = vacuum.sweep(planned)
    sweep = time.perf_counter() - t0
    dt = DeltaTable(before_uri)
    t0 = time.perf_counter()
    deleted = dt.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False, full=True)
    dt.create_checkpoint()
    dt.cleanup_metadata()
    before = time.perf_counter() - t0
    doc = {"files": args.vacuum_files, "bytes": size, "before_pause_s": before, "before_deleted": len(deleted),
           "now_pause_s": pause, "now_sweep_s": sweep, "now_deleted": swept.files_deleted, "ratio": pause / before,
           "goal": GOAL_VACUUM_PAUSE}
    print(f"  before: a {before:.2f} s pause ({len(deleted):,} files, {size / 2**20:,.0f} MiB); now: a {pause:.3f} s "
          f"pause, then {sweep:.2f} s of deletes in a worker ({swept.files_deleted:,} files): the pause "
          f"{doc['ratio']:.3f}× (goal ≤ {GOAL_VACUUM_PAUSE})", flush=True)
    print(f"  figures written to {dump('vacuum', doc, args)}")
    return doc


@dataclass
class Plan:
    layout: bool
    stream: bool
    latency: bool
    rss: bool


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=("layout", "stream", "latency", "rss", "vacuum"), action="append")
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--seconds", type=float, default=600.0, help="stream: seconds of writes")
    ap.add_argument("--idle-seconds", type=float, help="stream: idle seconds after (default: the interval + 30)")
    ap.add_argument("--interval-minutes", type=float, help="sink.maintenance.interval_minutes (default: its default)")
    ap.add_argument("--tx-per-s", type=float, default=100.0)
    ap.add_argument("--latency-seconds", type=float, default=120.0)
    ap.add_argument("--rss-seconds", type=float, default=3600.0)
    ap.add_argument("--vacuum-files", type=int, default=2_500)
    ap.add_argument("--vacuum-file-rows", type=int, default=20_000)
    ap.add_argument("--out-dir", type=Path, default=OUT_DIR)
    args = ap.parse_args(argv)
    only = set(args.only or ("layout", "stream", "latency"))
    if args.idle_seconds is None:
        from cdc_core.config import MaintenanceConfig

        args.idle_seconds = (args.interval_minutes or MaintenanceConfig().interval_minutes) * 60 + 30
    print(f"machine: nproc {os.cpu_count()}, load average {[round(x, 2) for x in os.getloadavg()]}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="binlake-maintenance-bench-"))
    server = LocalMariaDB(server_id=1)
    try:
        if "layout" in only:
            measure_layout(work, args)
        if only & {"stream", "latency", "rss"}:
            server.start()
            os.environ[PASSWORD_ENV] = server.password
            print(f"MariaDB on port {server.port}", flush=True)
        if only & {"stream", "rss"}:
            from bench.snapshot import load_table

            load_table(server, args.rows, DDL, VALUES)
        if "stream" in only:
            measure_stream(server, work, args)
        if "rss" in only:
            doc = run_stream(server, work, "rss", args.rss_seconds, RSS_DRAIN_SECONDS, argparse.Namespace(
                **{**vars(args), "interval_minutes": args.interval_minutes}), duckdb_reader())
            first, last = doc["rss_mib"].get("5 min"), doc["rss_mib"]["end of writes"]
            doc["ratio"] = last / first if first and last else None
            print(f"4. RSS: {first:.0f} MiB at 5 minutes, {last:.0f} MiB after {doc['seconds']:.0f} s: "
                  f"{doc['ratio']:.2f}× (goal ≤ {GOAL_RSS})")
            print(f"  figures written to {dump('rss', doc, args)}")
        if "latency" in only:
            measure_compaction_latency(server, work, args)
        if "vacuum" in only:
            measure_vacuum(work, args)
        return 0
    finally:
        server.cleanup()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
