"""Snapshot throughput benchmark: binlake vs Spark JDBC vs dlt vs the MariaDB C client.

    .venv/bin/python bench/snapshot.py [--rows N] [--parallelism P] [--chunk-size C] [--repeat K]
                                       [--warmup] [--profile] [--b-method both|arrow|parquet]
                                       [--whole-process]

One run starts a throwaway MariaDB (devtools.local_mariadb), loads N rows of a
7-column table from the Sequence engine, starts one Spark session (local[*] with
Debian's MariaDB Connector/J on spark.jars), then measures, alternating K times:

  (a)  binlake: SnapshotJob(cfg, spark).run() end to end into Delta
  (b)  Spark JDBC partitioned read (partitionColumn id, numPartitions P) into Delta,
       committed the way binlake commits (delta-rs; no delta-spark jars), two ways:
         arrow:   df.toArrow() → deltalake.write_deltalake
         parquet: Spark writes Parquet into the table folder → one delta-rs commit of add actions
       The faster of the two is (b) for the ratios (the stricter baseline for binlake).
  (c)  mariadb --batch --quick -e 'SELECT * ...' > /dev/null
  (c2) the same with P clients at once, each over an equal range of ids (P > 1)

With --whole-process each round also times whole processes, from start to exit, as users
run them (each into a fresh Delta table whose row count is then checked):

  (A)  `binlake snapshot -c FILE` (the CLI: validation, Spark start, the snapshot, its checks)
  (B)  a Python process that starts Spark, loads the table as (b) parquet does, stops Spark
  (D)  dlt (bench/dlt_snapshot.py in its own venv, bench/.dlt-venv, made on first use):
       sql_database, connectorx backend partitioned on id, table_format="delta"

and prints seconds and rows/s for each, the ratios (a)/(b) and (a)/(c) against the
targets (a ≥ 2× b, a ≥ 1/3 c), with --whole-process (A)/(B) (≥ 2) and (A)/(D) (≥ 1; ≥ 1.5
from 20M rows), Spark session start time and peak memory. Figures
are written to bench/out/snapshot.json. --profile instruments the binlake runs (timers
only; the work is unchanged) and breaks their time down into Spark job overhead,
watermark queries, connectorx reads, Arrow conversion, Parquet writes, Delta commits
and control-table writes, for the cold first run and the best warm run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import logging
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
# This checkout's packages, not an installed copy, also in every process started from here:
# the Spark JVM's Python workers and the whole-process runs inherit the environment.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import pymysql  # noqa: E402
import yaml  # noqa: E402
from deltalake import DeltaTable, write_deltalake  # noqa: E402

from bench.bytecode import compile_product  # noqa: E402
from cdc_core.config import parse_config  # noqa: E402
from devtools.local_mariadb import LocalMariaDB  # noqa: E402
from pipelines.lake.files import WrittenFile, commit_files  # noqa: E402
from pipelines.snapshot.driver import SnapshotJob  # noqa: E402
from pipelines.snapshot.task import GroupWritten  # noqa: E402
from pipelines.spark.session import get_spark  # noqa: E402

JDBC_JAR = "/usr/share/java/mariadb-java-client.jar"
DB, TABLE = "bench", "t"
OUT = REPO / "bench" / "out" / "snapshot.json"
TARGET_A_OVER_B = 2.0
TARGET_A_OVER_C = 1 / 3
TARGET_OVER_DLT = 1.0  # whole process, 2M rows
TARGET_OVER_DLT_LARGE = 1.5  # whole process, 20M rows and more
LARGE_ROWS = 20_000_000
TARGET_OVER_CLIENTS = 0.8  # whole process vs `parallelism` C clients at once (asked at 20M rows)
SPARK_CONF = {"spark.jars": JDBC_JAR, "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}
PASSWORD_VAR = "BINLAKE_BENCH_PASSWORD"  # the source password of every process this script starts
# dlt in a venv of its own (its dependencies never meet binlake's), with the connectorx and
# deltalake binlake uses, so the read and the Delta writer are the same libraries
DLT_VENV = REPO / "bench" / ".dlt-venv"
DLT_REQUIREMENTS = ("dlt[deltalake]", f"connectorx=={version('connectorx')}", f"deltalake=={version('deltalake')}",
                    "pymysql", "sqlalchemy")

DDL = """CREATE TABLE `{db}`.`{table}` (
  id BIGINT NOT NULL PRIMARY KEY,
  qty INT NOT NULL,
  name VARCHAR(32) NOT NULL,
  price DECIMAL(12,2) NOT NULL,
  created_at DATETIME NOT NULL,
  score DOUBLE NULL,
  note VARCHAR(64) NULL
) ENGINE=InnoDB"""


# --------------------------------------------------------------------------- setup


# Row ``seq`` of the table (an INSERT … SELECT list over the Sequence engine's ``seq``).
VALUES = ("seq, seq % 100000, CONCAT('user-', seq), (seq % 10000000) / 100, "
          "TIMESTAMP'2020-01-01 00:00:00' + INTERVAL seq SECOND, "
          "IF(seq % 10 = 0, NULL, seq / 7e0), IF(seq % 7 = 0, NULL, MD5(seq))")


def loaded_rows(server: LocalMariaDB) -> int | None:
    """Rows of the bench table in a reused data directory (``--datadir``), None without one."""
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
                    (DB, TABLE))
        if not cur.fetchone()[0]:
            return None
        cur.execute(f"SELECT COUNT(*) FROM `{DB}`.`{TABLE}`")
        return cur.fetchone()[0]


def load_table(server: LocalMariaDB, rows: int, ddl: str = DDL, values: str = VALUES) -> float:
    """Create the database and the table (``ddl``) and load ``rows`` rows (``values``); returns seconds."""
    t0 = time.perf_counter()
    conn = server.connect()
    with conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{DB}` DEFAULT CHARSET utf8mb4")
        cur.execute(ddl.format(db=DB, table=TABLE))
        conn.select_db(DB)  # seq_M_to_N (Sequence engine) resolves in the current database
        cur.execute("SET SESSION sql_log_bin = 0")  # the load itself is not part of any measurement
        step = 1_000_000
        for lo in range(1, rows + 1, step):
            hi = min(lo + step - 1, rows)
            cur.execute(f"INSERT INTO `{DB}`.`{TABLE}` SELECT {values} FROM seq_{lo}_to_{hi}")
        cur.execute(f"ANALYZE TABLE `{DB}`.`{TABLE}`")
        cur.fetchall()
        cur.execute(f"SELECT COUNT(*) FROM `{DB}`.`{TABLE}`")
        assert cur.fetchone()[0] == rows
    return time.perf_counter() - t0


@dataclass(frozen=True)
class Source:
    """Where the table is (a LocalMariaDB has the same attributes): what a child process gets."""

    host: str
    port: int
    user: str
    password: str

    def connect(self) -> pymysql.connections.Connection:
        return pymysql.connect(host=self.host, port=self.port, user=self.user, password=self.password)


class RssSampler:
    """Samples the RSS of the Spark JVM (a child of this process) under a label."""

    def __init__(self, interval: float = 0.2):
        self.interval = interval
        self.label: str | None = None
        self.peak_mb: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        try:
            import psutil
            self._psutil = psutil
        except ImportError:  # optional (dev extra)
            self._psutil = None

    def start(self) -> None:
        if self._psutil:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        me = self._psutil.Process()
        while not self._stop.wait(self.interval):
            label = self.label
            if label is None:
                continue
            try:
                jvms = [p for p in me.children(recursive=True) if p.name() == "java"]
                mb = sum(p.memory_info().rss for p in jvms) / 2**20
            except self._psutil.Error:
                continue
            self.peak_mb[label] = max(self.peak_mb.get(label, 0.0), mb)

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()


# --------------------------------------------------------------------------- (a) binlake


def binlake_config(server: LocalMariaDB, lake: str, name: str, parallelism: int, chunk_size: int,
                   runner: str = "auto"):
    return parse_config({
        "pipeline": {"name": name, "parallelism": parallelism},
        "source": {
            "host": server.host, "port": server.port, "user": server.user, "password": server.password,
            "server_id": 5400, "tables": [rf"{DB}\.{TABLE}"], "snapshot": {"chunk_size": chunk_size, "runner": runner},
        },
        "sink": {"path": lake},
    })


def run_binlake(server, spark, work: Path, run_id: str, args) -> dict:
    lake = work / f"lake-a-{run_id}"
    cfg = binlake_config(server, str(lake), f"bench_{run_id}", args.parallelism, args.chunk_size, args.runner)
    job = (ProfiledSnapshotJob if args.profile else SnapshotJob)(cfg, spark)
    t0 = time.perf_counter()
    summary = job.run()
    seconds = time.perf_counter() - t0
    (ts,) = summary.tables
    delta_rows = DeltaTable(str(lake / DB / TABLE)).to_pyarrow_dataset().count_rows()
    if delta_rows != args.rows or ts.delta_rows != args.rows:
        raise AssertionError(f"(a) binlake: Delta has {delta_rows} rows, MySQL {args.rows}")
    shutil.rmtree(lake, ignore_errors=True)
    out = {"seconds": seconds, "rows": delta_rows, "chunks": ts.chunks,
           "driver_peak_rss_mb": summary.driver_peak_rss_mb, "task_peak_rss_mb": summary.task_peak_rss_mb}
    if args.profile:
        out["profile"] = job_profile(job, seconds)
    return out


# --------------------------------------------------------------------------- (b) Spark JDBC


def jdbc_frame(server: LocalMariaDB, spark, parallelism: int, fetchsize: int):
    """Spark's partitioned JDBC read of the table (bounds from MIN/MAX, as Spark users do)."""
    conn = server.connect()
    with conn, conn.cursor() as cur:
        cur.execute(f"SELECT MIN(id), MAX(id) FROM `{DB}`.`{TABLE}`")
        lo, hi = cur.fetchone()
    return (
        spark.read.format("jdbc")
        # jdbc:mysql (not jdbc:mariadb): with jdbc:mariadb Spark picks a dialect that double-quotes identifiers
        .option("url", f"jdbc:mysql://{server.host}:{server.port}/{DB}")
        .option("driver", "org.mariadb.jdbc.Driver")
        .option("dbtable", TABLE)
        .option("user", server.user)
        .option("password", server.password)
        .option("partitionColumn", "id")
        .option("lowerBound", str(lo))
        .option("upperBound", str(hi + 1))
        .option("numPartitions", str(parallelism))
        .option("fetchsize", str(fetchsize))
        .load()
    )


def run_jdbc_arrow(server, spark, work: Path, run_id: str, args) -> dict:
    uri = str(work / f"lake-b-arrow-{run_id}")
    t0 = time.perf_counter()
    table = jdbc_frame(server, spark, args.parallelism, args.fetchsize).toArrow()
    t_read = time.perf_counter() - t0
    write_deltalake(uri, table, mode="append")
    seconds = time.perf_counter() - t0
    del table
    return _verify_b(uri, "arrow", seconds, args.rows, {"read_to_arrow_s": t_read})


def jdbc_parquet_load(server, spark, uri: str, parallelism: int, fetchsize: int) -> dict:
    """Spark writes the JDBC read as Parquet into ``uri``, then one delta-rs commit adds the files."""
    t0 = time.perf_counter()
    jdbc_frame(server, spark, parallelism, fetchsize).write.mode("append").parquet(uri)
    t_write = time.perf_counter() - t0
    files = []
    for name in sorted(os.listdir(uri)):
        if name.startswith("part-") and name.endswith(".parquet"):
            files.append(_written_file(uri, name))
    schema = pq.read_schema(os.path.join(uri, files[0].path)).remove_metadata()
    dt_ = DeltaTable.create(uri, schema=schema, mode="error")
    commit_files(dt_, files, schema, {"bench": "spark-parquet"})
    return {"spark_write_s": t_write, "files": len(files)}


def run_jdbc_parquet(server, spark, work: Path, run_id: str, args) -> dict:
    uri = str(work / f"lake-b-parquet-{run_id}")
    t0 = time.perf_counter()
    extra = jdbc_parquet_load(server, spark, uri, args.parallelism, args.fetchsize)
    seconds = time.perf_counter() - t0
    return _verify_b(uri, "parquet", seconds, args.rows, extra)


def _written_file(uri: str, name: str) -> WrittenFile:
    """Describe a Parquet file Spark wrote, with Delta stats from its footer (as binlake's file_stats)."""
    full = os.path.join(uri, name)
    meta = pq.read_metadata(full)
    stats: dict = {"numRecords": meta.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    schema = meta.schema.to_arrow_schema()
    for i, field in enumerate(schema):
        nulls, mins, maxs = 0, [], []
        for rg in range(meta.num_row_groups):
            st = meta.row_group(rg).column(i).statistics
            if st is None:
                continue
            nulls += st.null_count or 0
            if st.has_min_max and pa.types.is_integer(field.type):
                mins.append(st.min)
                maxs.append(st.max)
        stats["nullCount"][field.name] = nulls
        if mins:
            stats["minValues"][field.name] = min(mins)
            stats["maxValues"][field.name] = max(maxs)
    return WrittenFile(name, os.path.getsize(full), meta.num_rows, json.dumps(stats))


def _verify_b(uri: str, method: str, seconds: float, rows: int, extra: dict) -> dict:
    delta_rows = DeltaTable(uri).to_pyarrow_dataset().count_rows()
    if delta_rows != rows:
        raise AssertionError(f"(b) Spark JDBC {method}: Delta has {delta_rows} rows, MySQL {rows}")
    shutil.rmtree(uri, ignore_errors=True)
    return {"seconds": seconds, "rows": delta_rows, **extra}


# --------------------------------------------------------------------------- (c) C client


def run_client(server: LocalMariaDB, args, connections: int = 1) -> dict:
    """The C client reading the table into /dev/null: one SELECT, or ``connections`` clients at
    once, each over an equal range of ids (the read floor with binlake's parallelism)."""
    base = ["mariadb", f"-h{server.host}", "-P", str(server.port), f"-u{server.user}", f"-p{server.password}",
            "--batch", "--quick", "-e"]
    step = -(-args.rows // connections)
    where = [f" WHERE id BETWEEN {lo} AND {lo + step - 1}" if connections > 1 else ""
             for lo in range(1, args.rows + 1, step)]
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as devnull:
        procs = [subprocess.Popen(base + [f"SELECT * FROM {DB}.{TABLE}{w}"], stdout=devnull, stderr=subprocess.PIPE)
                 for w in where]
        errors = [p.communicate()[1] for p in procs]
    seconds = time.perf_counter() - t0
    for p, err in zip(procs, errors):
        if p.returncode:
            raise RuntimeError(f"mariadb client failed: {err.decode(errors='replace')}")
    return {"seconds": seconds, "rows": args.rows, "connections": len(procs)}


# --------------------------------------------------------------------------- CPU


_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def children_cpu_s() -> float:
    """User + system CPU seconds of this process's children that were waited for (wait4)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def with_cpu(server: LocalMariaDB, run):
    """``run`` (a whole-process or C-client measurement) with the CPU seconds it cost MariaDB
    (``server_cpu_s``) and its processes and their children (``client_cpu_s``) added to its result."""
    server0, children0 = process_cpu_s(server.pid), children_cpu_s()
    out = run()
    return {**out, "server_cpu_s": process_cpu_s(server.pid) - server0, "client_cpu_s": children_cpu_s() - children0}


# --------------------------------------------------------------------------- whole processes


def timed_process(cmd: list[str], password: str, what: str) -> tuple[float, str, float | None]:
    """Seconds from a process's start to its exit, its stdout, and its peak RSS in MiB (GNU
    time's %M, None without /usr/bin/time: wait4's figure here would include this large
    process's own RSS, which a forked child inherits until its exec); fails on a non-zero exit."""
    gnu_time = Path("/usr/bin/time")
    with tempfile.NamedTemporaryFile("r") as rss_file:
        wrapped = [str(gnu_time), "-f", "%M", "-o", rss_file.name, *cmd] if gnu_time.exists() else cmd
        t0 = time.perf_counter()
        r = subprocess.run(wrapped, cwd=REPO, capture_output=True, text=True,
                           env={**os.environ, PASSWORD_VAR: password})
        seconds = time.perf_counter() - t0
        if r.returncode != 0:
            raise AssertionError(f"{what} exited {r.returncode}: {r.stderr[-2000:]}")
        kib = rss_file.read().strip().splitlines()[-1:] if gnu_time.exists() else []
        return seconds, r.stdout, int(kib[0]) / 1024 if kib else None


def write_cli_config(server, path: Path, name: str, lake: Path, parallelism: int = 4,
                     chunk_size: int | None = None, runner: str = "auto") -> Path:
    """A ``binlake`` config file for the bench table (the password from ``PASSWORD_VAR``)."""
    source = {"host": server.host, "port": server.port, "user": server.user,
              "password": f"${{{PASSWORD_VAR}}}", "tables": [rf"{DB}\.{TABLE}"], "snapshot": {"runner": runner}}
    if chunk_size is not None:
        source["snapshot"]["chunk_size"] = chunk_size
    path.write_text(yaml.safe_dump({"pipeline": {"name": name, "parallelism": parallelism}, "source": source,
                                    "sink": {"path": str(lake)}}))
    return path


def timed_cli_snapshot(config: Path, password: str) -> tuple[float, float]:
    """Seconds and peak RSS (MiB) of one ``binlake snapshot -c config`` process, as a user runs
    it; fails on a non-zero exit or when it does not report Delta = MySQL row counts."""
    seconds, out, rss = timed_process([sys.executable, "-m", "pipelines.cli", "snapshot", "-c", str(config)], password,
                                 "binlake snapshot")
    if "match" not in out:
        raise AssertionError(f"binlake snapshot did not report Delta = MySQL counts:\n{out}")
    return seconds, rss


def _delta_rows(uri: str | Path, what: str, rows: int) -> int:
    n = DeltaTable(str(uri)).to_pyarrow_dataset().count_rows()
    if n != rows:
        raise AssertionError(f"{what}: Delta has {n} rows, MySQL {rows}")
    return n


def run_binlake_process(server, work: Path, run_id: str, args) -> dict:
    """(A) ``binlake snapshot`` as a subprocess into a fresh lake, with (a)'s settings."""
    lake = work / f"lake-A-{run_id}"
    config = write_cli_config(server, work / f"binlake-{run_id}.yaml", f"bench_cli_{run_id}", lake,
                              args.parallelism, args.chunk_size, args.runner)
    seconds, rss = timed_cli_snapshot(config, server.password)
    n = _delta_rows(lake / DB / TABLE, "(A) binlake snapshot", args.rows)
    shutil.rmtree(lake, ignore_errors=True)
    return {"seconds": seconds, "rows": n, "peak_rss_mb": rss}


def jdbc_process(spec: dict) -> int:
    """The child of (B): start Spark, load the table with Spark JDBC as (b) parquet does, stop."""
    spark = get_spark("local[*]", SPARK_CONF)
    src = Source(spec["host"], spec["port"], spec["user"], os.environ[PASSWORD_VAR])
    jdbc_parquet_load(src, spark, spec["uri"], spec["parallelism"], spec["fetchsize"])
    spark.stop()
    return 0


def run_jdbc_process(server, work: Path, run_id: str, args) -> dict:
    """(B) a process that starts Spark and loads the table with Spark JDBC (Parquet write + one
    delta-rs commit, the method (b) measures), as a Spark user's job runs."""
    uri = work / f"lake-B-{run_id}"
    spec = {"host": server.host, "port": server.port, "user": server.user, "uri": str(uri),
            "parallelism": args.parallelism, "fetchsize": args.fetchsize}
    seconds, _, rss = timed_process([sys.executable, __file__, "--jdbc-process", json.dumps(spec)],
                                    server.password, "Spark JDBC process")
    n = _delta_rows(uri, "(B) Spark JDBC process", args.rows)
    shutil.rmtree(uri, ignore_errors=True)
    return {"seconds": seconds, "rows": n, "peak_rss_mb": rss}


def dlt_python() -> Path:
    """The interpreter of bench/.dlt-venv, made on first use (``python3.11 -m venv``, then pip)."""
    py = DLT_VENV / "bin" / "python"
    stamp = DLT_VENV / ".installed"
    if not stamp.exists() or stamp.read_text() != " ".join(DLT_REQUIREMENTS):
        print(f"  installing dlt into {DLT_VENV} ...", flush=True)
        subprocess.run(["python3.11", "-m", "venv", str(DLT_VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *DLT_REQUIREMENTS], check=True)
        stamp.write_text(" ".join(DLT_REQUIREMENTS))
    return py


def run_dlt_process(server, work: Path, run_id: str, args) -> dict:
    """(D) dlt (bench/dlt_snapshot.py in bench/.dlt-venv) loading the table into a Delta table."""
    dest, workdir = work / f"lake-D-{run_id}", work / f"dlt-{run_id}"
    cmd = [str(dlt_python()), str(REPO / "bench" / "dlt_snapshot.py"), "--host", server.host,
           "--port", str(server.port), "--user", server.user, "--database", DB, "--table", TABLE,
           "--dest", str(dest), "--partitions", str(args.parallelism), "--workdir", str(workdir)]
    seconds, out, rss = timed_process(cmd, server.password, "dlt")
    doc = json.loads(out.strip().splitlines()[-1])
    n = _delta_rows(doc["delta_path"], "(D) dlt", args.rows)
    shutil.rmtree(dest, ignore_errors=True)
    shutil.rmtree(workdir, ignore_errors=True)
    return {"seconds": seconds, "rows": n, "stages": doc["stages"], "peak_rss_mb": rss}


# The whole-process runs of a round, in order: key -> (label, runner)
WHOLE_PROCESS = {"w_binlake": ("(A) binlake snapshot", run_binlake_process),
                 "w_jdbc": ("(B) Spark JDBC job", run_jdbc_process),
                 "w_dlt": ("(D) dlt", run_dlt_process)}


# --------------------------------------------------------------------------- profiling


_PATCH_LOCK = threading.Lock()
_PROF = threading.local()  # the running task's timers: one per thread (the local runner reads groups in threads)


def timed_run_group(task):
    """The group reader of the profiled run: pipelines.snapshot.task.run_group with timers
    around its steps (patched once per process; each thread sums into its own task's timers).
    Returns ``{"result": the group's result, "profile": its timers}``: a builtin container
    crosses back from Spark's Python workers whichever module defines this function."""
    import time as _t

    wall_start = _t.time()
    t_start = _t.perf_counter()
    import connectorx  # noqa: F401  (first import on a cold worker is part of the cost)

    t_import = _t.perf_counter() - t_start
    import cdc_core.chunks.reader as cr
    import pipelines.snapshot.connections as sc
    import pipelines.snapshot.task as st

    with _PATCH_LOCK:
        fresh = not getattr(cr, "_bench_patched", False)  # first task in this Python process
        if fresh:
            cr._bench_patched = True

            def timed(key, fn):
                def wrapper(*a, **kw):
                    t0 = _t.perf_counter()
                    try:
                        return fn(*a, **kw)
                    finally:
                        prof = getattr(_PROF, "prof", None)  # None: the driver's own call (local runner)
                        if prof is not None:
                            prof[key] = prof.get(key, 0.0) + _t.perf_counter() - t0
                return wrapper

            cr.master_position = timed("watermark_queries_s", cr.master_position)
            cr.read_changes = timed("binlog_window_reads_s", cr.read_changes)
            cr.ChunkReader._canonical = timed("arrow_canonicalise_s", cr.ChunkReader._canonical)
            connectorx.read_sql = timed("connectorx_read_s", connectorx.read_sql)
            st.write_parquet = timed("parquet_write_s", st.write_parquet)
            sc.connect = timed("control_connect_s", sc.connect)
    prof = _PROF.prof = {}
    t0 = _t.perf_counter()
    result = st.run_group(task)
    prof["run_group_s"] = _t.perf_counter() - t0
    prof["cold_import_s"] = t_import
    prof["worker_total_s"] = _t.perf_counter() - t_start
    profile = {**prof, "fresh_worker": fresh, "wall_start": wall_start, "wall_end": _t.time()}
    _PROF.prof = None
    return {"result": result, "profile": profile}


class ProfiledSnapshotJob(SnapshotJob):
    """SnapshotJob with timers: driver phases, each Spark job, executor steps, commits."""

    def __init__(self, cfg, spark, progress=None):
        super().__init__(cfg, spark, progress)
        self.prof: dict[str, float] = {}
        self.tasks: list[dict] = []
        self._lock = threading.Lock()
        self._t_start = 0.0
        store = self.store
        for meth, key in (("load_plans", "control_load_plans_s"), ("save_plan", "control_save_plan_s"),
                          ("completed_chunks", "control_completed_chunks_s"),
                          ("record_chunks", "control_record_chunks_s")):
            setattr(store, meth, self._timed(key, getattr(store, meth)))
        self.runner._attempt = self._timed_attempt(self.runner._attempt)

    def _add(self, key: str, seconds: float) -> None:
        with self._lock:
            self.prof[key] = self.prof.get(key, 0.0) + seconds

    def _timed(self, key, fn):
        def wrapper(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self._add(key, time.perf_counter() - t0)
        return wrapper

    def run(self):
        self._t_start = time.perf_counter()
        summary = super().run()
        self.prof["total_s"] = time.perf_counter() - self._t_start
        self.prof["after_execute_s"] = self.prof["total_s"] - self.prof["before_execute_s"] - self.prof["execute_s"]
        return summary

    def _execute(self, tasks, tables, by_table, summary, total):
        t0 = time.perf_counter()
        self.prof["before_execute_s"] = t0 - self._t_start
        self.prof["tasks"] = len(tasks)
        self.prof["chunks"] = total
        super()._execute(tasks, tables, by_table, summary, total)
        self.prof["execute_s"] = time.perf_counter() - t0

    group_fn = staticmethod(timed_run_group)

    def _timed_attempt(self, attempt):
        """The runner's one attempt at a group, timed as a Spark job; the task's timers kept."""
        def timed(task, what):
            t0, submitted = time.perf_counter(), time.time()
            answer = attempt(task, what)
            job_s, returned = time.perf_counter() - t0, time.time()
            if not isinstance(answer, dict):
                return answer  # a stalled attempt: the runner handles it
            result, p = answer["result"], answer["profile"]
            if not isinstance(result, GroupWritten):
                return result  # a retry or a failure: the runner handles it
            p["spark_job_s"] = job_s
            p["spark_overhead_s"] = job_s - p["worker_total_s"]
            p["submit_to_task_start_s"] = p.pop("wall_start") - submitted
            p["task_end_to_result_s"] = returned - p.pop("wall_end")
            p["chunks"] = len(task.chunks)
            p["rows"] = sum(r.rows for r in result.records)
            with self._lock:
                self.tasks.append(p)
            return result
        return timed

    def _commit(self, table, schema, results):
        t0 = time.perf_counter()
        records = super()._commit(table, schema, results)
        self._add("commit_total_s", time.perf_counter() - t0)
        return records


def spark_empty_job_seconds(spark, n: int = 10) -> float:
    """Median latency of a one-task Python RDD job (the shape of each binlake group job)."""
    sc = spark.sparkContext
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        sc.parallelize([0], 1).map(lambda x: x).collect()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def connectorx_whole_table(server: LocalMariaDB, parallelism: int) -> dict:
    """connectorx on the driver: the whole table in one query, and partitioned on id."""
    import connectorx as cx

    url = f"mysql://{server.user}:{server.password}@{server.host}:{server.port}/{DB}"
    sql = f"SELECT * FROM `{DB}`.`{TABLE}`"
    out = {}
    t0 = time.perf_counter()
    cx.read_sql(url, sql, return_type="arrow")
    out["one_query_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    cx.read_sql(url, sql, return_type="arrow", partition_on="id", partition_num=parallelism)
    out[f"partitioned_{parallelism}_s"] = time.perf_counter() - t0
    return out


def job_profile(job: ProfiledSnapshotJob, seconds: float) -> dict:
    """Driver phases and per-task step times of one instrumented run, summed over tasks."""
    sums: dict[str, float] = {}
    for p in job.tasks:
        for k, v in p.items():
            if k.endswith("_s"):
                sums[k] = sums.get(k, 0.0) + v
    steps = ("control_connect_s", "watermark_queries_s", "connectorx_read_s", "arrow_canonicalise_s",
             "binlog_window_reads_s", "parquet_write_s")
    sums["run_group_other_s"] = sums.get("run_group_s", 0.0) - sum(sums.get(k, 0.0) for k in steps)
    launches = sorted(p["submit_to_task_start_s"] for p in job.tasks)
    slots = job.slots
    busy = sums.get("worker_total_s", 0.0) / max(slots * job.prof.get("execute_s", 0.0), 1e-9)
    return {"seconds": seconds, "driver": dict(job.prof), "task_sums": sums, "slot_busy_fraction": busy,
            "fresh_workers": sum(p["fresh_worker"] for p in job.tasks),
            "max_submit_to_task_start_s": launches[-1] if launches else 0.0, "tasks": job.tasks}


def profile_extras(server, spark, args) -> dict:
    return {"spark_empty_job_median_s": spark_empty_job_seconds(spark),
            "connectorx_driver": connectorx_whole_table(server, args.parallelism)}


# --------------------------------------------------------------------------- report


def _fmt_rate(rows: int, seconds: float) -> str:
    return f"{rows / seconds:,.0f}"


def _verdict(ratio: float, target: float, a_s: float, other_s: float) -> str:
    if ratio >= target:
        return f"PASS (+{(ratio / target - 1) * 100:.0f}% over target)"
    need = other_s / target  # (a) seconds that would just meet the target
    return (f"MISS by {(1 - ratio / target) * 100:.0f}%: binlake needs {target / ratio:.2f}x its throughput, "
            f"<= {need:.2f} s instead of {a_s:.2f} s")


def summarise(results: dict[str, list[dict]]) -> dict[str, dict]:
    out = {}
    for key, runs in results.items():
        if not runs:
            continue
        secs = [r["seconds"] for r in runs]
        out[key] = {"best_s": min(secs), "median_s": statistics.median(secs), "runs_s": secs}
    return out


def print_report(args, env: dict, stats: dict[str, dict], results: dict, extras: dict | None) -> dict:
    n = args.rows
    labels = {
        "a": "(a)  binlake SnapshotJob -> Delta",
        "b_arrow": "(b)  Spark JDBC -> toArrow -> write_deltalake",
        "b_parquet": "(b)  Spark JDBC -> Spark Parquet -> delta-rs commit",
        "c": "(c)  mariadb --batch --quick > /dev/null",
        "c_parallel": "(c2) the same, `parallelism` clients over id ranges",
        "w_binlake": "(A)  `binlake snapshot` process",
        "w_jdbc": "(B)  Spark JDBC job process (start Spark, Parquet)",
        "w_dlt": "(D)  dlt process (connectorx, partitioned, delta)",
    }
    b_methods = [k for k in ("b_arrow", "b_parquet") if k in stats]
    b_key = min(b_methods, key=lambda k: stats[k]["median_s"]) if b_methods else None
    print()
    print(f"binlake snapshot benchmark: {n:,} rows x 7 columns, parallelism {args.parallelism}, "
          f"chunk_size {args.chunk_size}, fetchsize {args.fetchsize}, repeat {args.repeat}"
          + (", after an untimed warm-up round" if args.warmup else ", first round cold")
          + (", (a) instrumented (--profile)" if args.profile else ""))
    print(f"  machine: nproc {env['nproc']}, {env['cpu']}, load average at start {env['loadavg_start']}, "
          f"at end {env['loadavg_end']}")
    if env["load_s"] is not None:
        print(f"  MariaDB load ({n:,} rows INSERT ... SELECT FROM seq_1_to_{n} + ANALYZE): {env['load_s']:.2f} s")
    else:
        print(f"  MariaDB: the table of {n:,} rows reused from {args.datadir}")
    if env["spark_start_s"] is not None:
        print(f"  Spark session start (local[*], spark.jars={JDBC_JAR}): {env['spark_start_s']:.2f} s")
    print()
    header = f"  {'run':<54}{'best s':>9}{'median s':>10}{'rows/s (median)':>17}{'rows/s (best)':>15}"
    print(header)
    print("  " + "-" * (len(header) - 2))
    for key in labels:
        if key not in stats:
            continue
        s = stats[key]
        mark = "  <- (b)" if key == b_key and len(b_methods) > 1 else ""
        print(f"  {labels[key]:<54}{s['best_s']:>9.2f}{s['median_s']:>10.2f}"
              f"{_fmt_rate(n, s['median_s']):>17}{_fmt_rate(n, s['best_s']):>15}{mark}")
    if args.repeat > 1:
        print("  runs (s): " + "; ".join(f"{k}: " + ", ".join(f"{x:.2f}" for x in stats[k]["runs_s"])
                                         for k in stats))
    if b_key:
        print(f"  (b) = {b_key.split('_')[1]} write, the faster (median) of the Spark JDBC -> Delta methods measured")
    print_cpu(stats, results, labels, n, env["nproc"])
    print()
    ratios = {}
    print(f"  {'ratio of rows/s':<18}{'median':>8}{'best':>8}{'target':>9}   result (median)")
    comparisons = [("(a)/(b)", "a", b_key, TARGET_A_OVER_B), ("(a)/(c)", "a", "c", TARGET_A_OVER_C)]
    if "w_binlake" in stats:
        over_dlt = TARGET_OVER_DLT_LARGE if n >= LARGE_ROWS else TARGET_OVER_DLT
        comparisons += [("(A)/(B)", "w_binlake", "w_jdbc", TARGET_A_OVER_B),
                        ("(A)/(D)", "w_binlake", "w_dlt", over_dlt),
                        ("(A)/(c2)", "w_binlake", "c_parallel", TARGET_OVER_CLIENTS)]
    for name, mine, other, target in comparisons:
        if mine not in stats or other not in stats:
            continue
        tlabel = f">= {target:.2f}"
        med = stats[other]["median_s"] / stats[mine]["median_s"]
        best = stats[other]["best_s"] / stats[mine]["best_s"]
        verdict = _verdict(med, target, stats[mine]["median_s"], stats[other]["median_s"])
        ratios[name] = {"median": med, "best": best, "target": target, "pass": med >= target, "verdict": verdict}
        print(f"  {name:<18}{med:>8.2f}{best:>8.2f}{tlabel:>9}   {verdict}")
    print()
    if not results["a"]:
        return {"b_method": b_key, "ratios": ratios}
    first_a = results["a"][0]
    when = "first (a) run" if args.warmup else "first (a) run, before any (b)"
    print(f"  binlake: {first_a['chunks']} chunks; driver peak RSS {first_a['driver_peak_rss_mb']:.0f} MB "
          f"(Python driver, {when}); task peak RSS "
          f"{max(r['task_peak_rss_mb'] for r in results['a']):.0f} MB (Python worker)")
    whole = [(labels[k].split(")")[0] + ")", max(r["peak_rss_mb"] or 0.0 for r in results[k]))
             for k in WHOLE_PROCESS if results.get(k)]
    if whole:
        print("  whole processes, peak RSS (GNU time: the largest of the process and its children): "
              + ", ".join(f"{k} {v:.0f} MB" for k, v in whole))
    if env.get("jvm_peak_rss_mb"):
        print("  Spark JVM peak RSS (sampled; the JVM keeps heap it grew): " + ", ".join(f"{k} {v:.0f} MB"
                                                              for k, v in env["jvm_peak_rss_mb"].items()))
    if env["nproc"] <= 2 or env["loadavg_start"][0] > 0.5:
        print(f"  note: {env['nproc']} cores shared with MariaDB, the JVM and any concurrent work "
              "(other test runs): figures are noisy; use --repeat")
    if extras:
        print_profile(results, extras, args)
    return {"b_method": b_key, "ratios": ratios}


def print_cpu(stats: dict[str, dict], results: dict, labels: dict[str, str], rows: int, cores: int) -> None:
    """CPU seconds per million rows of MariaDB and of the measured processes (with their
    children), medians over the runs, and the wall time that CPU implies on ``cores`` cores."""
    keys = [k for k in labels if k in stats and "server_cpu_s" in results[k][0]]
    if not keys:
        return
    print()
    print(f"  CPU seconds per million rows (medians){'':<17}{'MariaDB':>9}{'client':>9}{'sum':>9}"
          f"{f'bound on {cores} cores s':>24}{'wall s':>9}")
    for key in keys:
        server = statistics.median(r["server_cpu_s"] for r in results[key])
        client = statistics.median(r["client_cpu_s"] for r in results[key])
        per = 1e6 / rows
        print(f"  {labels[key]:<54}{server * per:>9.2f}{client * per:>9.2f}{(server + client) * per:>9.2f}"
              f"{(server + client) / cores:>24.2f}{stats[key]['median_s']:>9.2f}")
        stats[key].update(server_cpu_s=server, client_cpu_s=client)


def print_profile(results: dict, extras: dict, args) -> None:
    runs = results["a"]
    cols = [("run 1" if args.warmup else "run 1 (cold)", runs[0]["profile"])]
    if len(runs) > 1:
        warm = min(runs[1:], key=lambda r: r["seconds"])
        cols.append((f"best warm (run {runs.index(warm) + 1})", warm["profile"]))
    p0 = cols[0][1]
    print()
    where = (f"{extras['spark_slots']} Spark task slots" if args.runner == "spark"
             else "runner auto: local threads on local[*], not Spark")
    print(f"  profile of the instrumented binlake runs ({p0['driver']['tasks']:.0f} groups (a Spark job of 1 task "
          f"each on Spark), {p0['driver']['chunks']:.0f} chunks, {args.parallelism} driver threads, {where}); "
          "seconds:")
    print(f"    {'':<66}" + "".join(f"{name:>22}" for name, _ in cols))

    def line(label: str, values: list[float]) -> None:
        print(f"    {label:<66}" + "".join(f"{v:>22.2f}" for v in values))

    line("wall clock of SnapshotJob.run()", [p["seconds"] for _, p in cols])
    for key, label in (("before_execute_s", "  plan: schemas, ensure_table, plan_chunks, control reads"),
                       ("execute_s", "  execute: Spark jobs + driver commits"),
                       ("after_execute_s", "  verify: COUNT(*) in MySQL, Delta row count"),
                       ("commit_total_s", "    driver: Delta commits + snapshot_chunks appends"),
                       ("control_record_chunks_s", "      of which snapshot_chunks appends (write_deltalake)"),
                       ("control_save_plan_s", "    driver: snapshot_plan append")):
        line(label, [p["driver"].get(key, 0.0) for _, p in cols])
    print("    summed over tasks (tasks run concurrently, so sums exceed wall time):")
    names = {"spark_job_s": "  Spark job submit -> result, driver view",
             "spark_overhead_s": "    outside the Python task function",
             "submit_to_task_start_s": "      submit -> task function starts (queue, launch, unpickle)",
             "task_end_to_result_s": "      task function ends -> result on driver",
             "worker_total_s": "    inside the Python task function",
             "cold_import_s": "      import connectorx",
             "control_connect_s": "      pymysql control connection",
             "watermark_queries_s": "      SHOW MASTER STATUS (LW + HW per chunk)",
             "connectorx_read_s": "      connectorx chunk SELECTs",
             "arrow_canonicalise_s": "      Arrow canonicalisation (casts)",
             "binlog_window_reads_s": "      binlog window reads",
             "parquet_write_s": "      Parquet write + file stats",
             "run_group_other_s": "      other (concat, chunk records)"}
    for key, label in names.items():
        line(label, [p["task_sums"].get(key, 0.0) for _, p in cols])
    line("  longest wait submit -> task start", [p["max_submit_to_task_start_s"] for _, p in cols])
    print("    Spark task slots busy in binlake's task function during execute: " + ", ".join(
        f"{name} {p['slot_busy_fraction'] * 100:.0f}%" for name, p in cols))
    print("    tasks that started a fresh Python worker: " + ", ".join(
        f"{name} {p['fresh_workers']}" for name, p in cols))
    print(f"    one-task Python RDD job (warm), median of 10: {extras['spark_empty_job_median_s'] * 1000:.0f} ms")
    print("    connectorx on the driver, whole table: " + ", ".join(
        f"{k[:-2].replace('_', ' ')} {v:.2f} s" for k, v in extras["connectorx_driver"].items()))


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--parallelism", type=int, default=4, help="binlake pipeline.parallelism and JDBC numPartitions")
    ap.add_argument("--chunk-size", type=int, default=8096, help="binlake source.snapshot.chunk_size")
    ap.add_argument("--runner", choices=("auto", "spark", "local"), default="auto",
                    help="binlake source.snapshot.runner (auto: local on local[*])")
    ap.add_argument("--fetchsize", type=int, default=10_000, help="Spark JDBC fetchsize")
    ap.add_argument("--repeat", type=int, default=1, help="run (a), (b), (c) this many times, alternating")
    ap.add_argument("--b-method", choices=("both", "arrow", "parquet"), default="both",
                    help="how (b) writes Delta; 'both' measures both and uses the faster")
    ap.add_argument("--profile", action="store_true",
                    help="instrument the binlake runs and print where their time goes")
    ap.add_argument("--warmup", action="store_true",
                    help="one untimed round of (a) and (b) first (otherwise run 1 includes Python worker "
                         "start-up for (a) and JDBC class loading for (b))")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a ratio misses its target")
    ap.add_argument("--whole-process", action="store_true",
                    help="also time whole processes each round: (A) `binlake snapshot`, (B) a Spark JDBC job, "
                         "(D) dlt (bench/.dlt-venv, made on first use)")
    ap.add_argument("--whole-only", action="store_true",
                    help="with --whole-process: only the whole processes and (c2), no Spark session here, no (a), "
                         "(b), (c)")
    ap.add_argument("--no-jdbc", action="store_true", help="with --whole-process: leave out (B), the Spark JDBC job")
    ap.add_argument("--datadir", type=Path,
                    help="keep MariaDB's data directory here and reuse its table when it holds --rows rows "
                         "(loading 20M rows takes minutes)")
    ap.add_argument("--jdbc-process", metavar="JSON", help=argparse.SUPPRESS)  # (B)'s child
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    compile_product()  # whole processes start as an installed copy does (bench/bytecode.py)
    if args.whole_only and (not args.whole_process or args.profile):
        ap.error("--whole-only needs --whole-process and leaves out --profile's in-session runs")
    if args.jdbc_process:
        return jdbc_process(json.loads(args.jdbc_process))
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")

    env: dict = {"nproc": os.cpu_count(), "cpu": platform.processor() or platform.machine(),
                 "loadavg_start": [round(x, 2) for x in os.getloadavg()],
                 "started_at": dt.datetime.now(dt.UTC).isoformat()}
    work = Path(tempfile.mkdtemp(prefix="binlake-bench-"))
    if args.datadir:
        args.datadir.mkdir(parents=True, exist_ok=True)
    server = LocalMariaDB(server_id=1, base_dir=args.datadir)
    sampler = RssSampler()
    spark = None
    try:
        server.start()
        held = loaded_rows(server)
        if held == args.rows:
            env["load_s"] = None
            print(f"MariaDB on port {server.port}; reusing the {held:,} rows in {args.datadir}", flush=True)
        elif held is not None:
            raise SystemExit(f"{args.datadir} holds a table of {held:,} rows, not {args.rows:,}: use another --datadir")
        else:
            print(f"MariaDB on port {server.port}; loading {args.rows:,} rows ...", flush=True)
            env["load_s"] = load_table(server, args.rows)
            print(f"  loaded in {env['load_s']:.2f} s", flush=True)
        env["spark_start_s"] = None
        if not args.whole_only:
            t0 = time.perf_counter()
            spark = get_spark("local[*]", SPARK_CONF)
            env["spark_start_s"] = time.perf_counter() - t0
            env["spark_default_parallelism"] = spark.sparkContext.defaultParallelism
            sampler.start()

        b_methods = ["arrow", "parquet"] if args.b_method == "both" else [args.b_method]
        results: dict[str, list[dict]] = {"a": [], "b_arrow": [], "b_parquet": [], "c": [], "c_parallel": [],
                                          **{k: [] for k in WHOLE_PROCESS}}
        if args.whole_process:
            dlt_python()  # made before any clock starts
        whole = {k: v for k, v in WHOLE_PROCESS.items() if not (args.no_jdbc and k == "w_jdbc")}
        if args.warmup and not args.whole_only:
            print("  warm-up round (untimed) ...", flush=True)
            run_binlake(server, spark, work, "warmup", argparse.Namespace(**{**vars(args), "profile": False}))
            for m in b_methods:
                (run_jdbc_arrow if m == "arrow" else run_jdbc_parquet)(server, spark, work, "warmup", args)
        for i in range(args.repeat):
            rid = str(i)
            for m in [] if args.whole_only else ["a", *b_methods, "c"]:
                if m == "c":
                    r = with_cpu(server, lambda: run_client(server, args))
                    results["c"].append(r)
                    print(f"  [{i + 1}/{args.repeat}] (c) mariadb client     {r['seconds']:7.2f} s", flush=True)
                    continue
                if m == "a":
                    sampler.label = "(a) run 1" if i == 0 else "(a) later runs"
                    r = run_binlake(server, spark, work, rid, args)
                    results["a"].append(r)
                    print(f"  [{i + 1}/{args.repeat}] (a) binlake            {r['seconds']:7.2f} s", flush=True)
                    continue
                sampler.label = "(b) run 1" if i == 0 else "(b) later runs"
                fn = run_jdbc_arrow if m == "arrow" else run_jdbc_parquet
                r = fn(server, spark, work, rid, args)
                results[f"b_{m}"].append(r)
                print(f"  [{i + 1}/{args.repeat}] (b) Spark JDBC {m:<8} {r['seconds']:7.2f} s", flush=True)
                sampler.label = None
            if args.parallelism > 1:
                r = with_cpu(server, lambda: run_client(server, args, args.parallelism))
                results["c_parallel"].append(r)
                print(f"  [{i + 1}/{args.repeat}] (c2) {args.parallelism} mariadb clients {r['seconds']:7.2f} s",
                      flush=True)
            if args.whole_process:
                for key, (label, fn) in whole.items():
                    r = with_cpu(server, functools.partial(fn, server, work, rid, args))
                    results[key].append(r)
                    print(f"  [{i + 1}/{args.repeat}] {label:<22} {r['seconds']:7.2f} s (whole process)", flush=True)
        extras = None
        if args.profile:
            extras = {**profile_extras(server, spark, args), "spark_slots": env["spark_default_parallelism"]}
        sampler.stop()
        env["jvm_peak_rss_mb"] = sampler.peak_mb
        env["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        stats = summarise(results)
        verdicts = print_report(args, env, stats, results, extras)

        doc = {
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "env": env,
            "results": {k: {**stats[k], "rows_per_s_median": args.rows / stats[k]["median_s"],
                            "rows_per_s_best": args.rows / stats[k]["best_s"], "runs": results[k]}
                        for k in stats},
            **verdicts,
            "profile_extras": extras,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        print(f"\n  figures written to {args.out}")
        missed = not all(v["pass"] for v in verdicts["ratios"].values())
        return 1 if args.strict and missed else 0
    finally:
        sampler.stop()
        if spark is not None:
            spark.stop()
        server.cleanup()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
