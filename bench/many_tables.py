"""Many tables: the cost per table of the snapshot, of the stream's commits and of loading
the Dagster definitions, each against the same work on one table (or few) measured in the same run.

    .venv/bin/python bench/many_tables.py [--tables N] [--rows R] [--only snapshot|stream|defs] [--profile DIR]

One run starts a throwaway MariaDB (devtools.local_mariadb) and creates N tables ``many.t0000..``
(default 500) of R rows each (default 100; bench/snapshot.py's 7 columns) and one table
``one.t`` of N × R rows: the same rows in one table, the baseline.

1. Snapshot, whole process: ``binlake snapshot -c FILE`` as a subprocess (as a user runs it)
   over the N tables, and over ``one.t``. The cost per table beyond its rows is
   (N tables − one table) / N; goal ≤ 10 ms (500 small tables ≤ 5 s).
2. Stream: a StreamEngine in a thread of this process, starting at the binlog position after
   the tables were created, into a fresh sink. A warm-up transaction touching every table
   (its batch creates the Delta tables) becomes visible first; then K transactions (default
   20), each inserting one row into every table, are committed back to back. The lag is
   from the last COMMIT returning to the checkpoint of the batch holding it (the engine's
   ``progress`` callback: every table's commit of the batch has landed); baseline: the same
   rows in K transactions on ``one.t`` alone. Each batch's table commits are timed (from the
   start of ``Committer.apply`` to its return), with this process's CPU over the same span per
   table commit (the engine's threads; less swayed by other load than the wall time): goal ≤ 1 s
   for a batch touching 500 tables.
   Afterwards every table's Delta row count is checked against MySQL's.
3. Definitions: a subprocess building the definitions (``build_binlake_definitions`` over a
   table catalog discovered before, untimed, and the snapshot's lake when it ran) and
   resolving the asset graph and every job, timed whole process with its peak RSS (GNU
   time); baseline: the same over 7 tables.
   Goal for 2,000 tables: ≤ 10 s and ≤ 500 MB.

With ``--profile DIR`` the snapshot and definitions subprocesses run under cProfile
(``DIR/*.prof``; the times printed then include the profiler's overhead).

**Excludes**: the Spark runner (``runner: auto`` picks local threads for tables this small),
object stores, and the first load of a Dagster code server (``dagster dev``'s UI process).
Figures go to bench/out/many_tables.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))

import yaml  # noqa: E402
from deltalake import DeltaTable  # noqa: E402

from bench.bytecode import compile_product  # noqa: E402
from bench.snapshot import DDL, VALUES, children_cpu_s, timed_process  # noqa: E402
from cdc_core.config import parse_config  # noqa: E402
from devtools.local_mariadb import LocalMariaDB  # noqa: E402
from pipelines.source_catalog import discover  # noqa: E402
from pipelines.stream import StreamEngine, StreamSummary  # noqa: E402

OUT = REPO / "bench" / "out" / "many_tables.json"
PASSWORD_VAR = "BINLAKE_BENCH_PASSWORD"
MANY, ONE = "many", "one"
SNAPSHOT_PER_TABLE_MS = 10.0
STREAM_LAG_S = 1.0
DEFS_S, DEFS_MB = 10.0, 500.0
DEFS_BASELINE_TABLES = 7

# The definitions as a code location builds them, then the asset graph and every job resolved.
DEFS_SCRIPT = """
import sys
from orchestration.build import build_binlake_definitions
defs = build_binlake_definitions(sys.argv[1], catalog_path=sys.argv[2])
repo = defs.get_repository_def()
print(len(repo.asset_graph.get_all_asset_keys()), len(repo.get_all_jobs()))
"""


def table_names(n: int) -> list[str]:
    return [f"t{i:04d}" for i in range(n)]


def create_tables(server: LocalMariaDB, n: int, rows: int) -> None:
    """N tables of ``rows`` rows in ``many`` and one of N × rows in ``one`` (not in the binlog)."""
    conn = server.connect()
    with conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        for db in (MANY, ONE):
            cur.execute(f"CREATE DATABASE `{db}` DEFAULT CHARSET utf8mb4")
        conn.select_db(MANY)  # seq_M_to_N resolves in the current database
        for t in table_names(n):
            cur.execute(DDL.format(db=MANY, table=t))
            cur.execute(f"INSERT INTO `{MANY}`.`{t}` SELECT {VALUES} FROM seq_1_to_{rows}")
        cur.execute(DDL.format(db=ONE, table="t"))
        cur.execute(f"INSERT INTO `{ONE}`.`t` SELECT {VALUES} FROM seq_1_to_{n * rows}")
        conn.commit()


def write_config(server: LocalMariaDB, path: Path, name: str, lake: Path, database: str,
                 start: tuple[str, int] | None = None) -> Path:
    source: dict = {"host": server.host, "port": server.port, "user": server.user,
                    "password": f"${{{PASSWORD_VAR}}}", "tables": [rf"{database}\..*"]}
    if start is not None:
        source["server_id"] = 7100 + len(name)
        source["startup"] = {"mode": "specific", "file": start[0], "pos": start[1]}
    path.write_text(yaml.safe_dump({"pipeline": {"name": name}, "source": source, "sink": {"path": str(lake)}}))
    return path


# ``binlake snapshot`` under cProfile: pipelines.cli.run leaves with os._exit (no profile written), main returns.
PROFILED_CLI = """
import cProfile, sys
from pipelines.cli import main
profile = cProfile.Profile()
code = profile.runcall(main, sys.argv[2:])
profile.dump_stats(sys.argv[1])
sys.stdout.flush()
import os; os._exit(code)
"""


def profiled(cmd: list[str], profile: Path | None, name: str) -> list[str]:
    """``cmd`` (a Python command) under cProfile into ``profile/name.prof`` when ``profile`` is set."""
    if profile is None:
        return cmd
    profile.mkdir(parents=True, exist_ok=True)
    out = str(profile / f"{name}.prof")
    if cmd[1:3] == ["-m", "pipelines.cli"]:
        return [cmd[0], "-c", PROFILED_CLI, out, *cmd[3:]]
    return [cmd[0], "-m", "cProfile", "-o", out, *cmd[1:]]


def measure_snapshot(server: LocalMariaDB, work: Path, n: int, args) -> dict:
    out = {}
    for what, db in (("one", ONE), ("many", MANY)):
        config = write_config(server, work / f"snap-{what}.yaml", f"bench_many_snap_{what}", work / f"lake-{what}", db)
        cmd = profiled([sys.executable, "-m", "pipelines.cli", "snapshot", "-c", str(config)], args.profile,
                       f"snapshot-{what}")
        cpu0 = children_cpu_s()
        seconds, stdout, rss = timed_process(cmd, server.password, f"binlake snapshot ({what})")
        cpu = children_cpu_s() - cpu0
        if stdout.count("match") < (n if what == "many" else 1) or "differs" in stdout:
            raise AssertionError(f"binlake snapshot ({what}) did not report Delta = MySQL for every table:\n{stdout}")
        out[what] = {"seconds": seconds, "cpu_s": cpu, "peak_rss_mb": rss, "load": os.getloadavg()[0]}
        print(f"  snapshot {what:>4} ({n if what == 'many' else 1} tables): {seconds:6.2f} s, CPU {cpu:6.2f} s, "
              f"peak RSS {rss or 0:.0f} MB, load {out[what]['load']:.1f}", flush=True)
    per_table_ms = (out["many"]["seconds"] - out["one"]["seconds"]) / n * 1000
    out["per_table_ms"] = per_table_ms
    # binlake's own CPU per table (MySQL's excluded): the figure to compare runs on a loaded machine by
    out["cpu_per_table_ms"] = (out["many"]["cpu_s"] - out["one"]["cpu_s"]) / n * 1000
    out["pass"] = per_table_ms <= SNAPSHOT_PER_TABLE_MS
    print(f"  snapshot cost per table beyond its rows: {per_table_ms:.1f} ms, CPU {out['cpu_per_table_ms']:.1f} ms "
          f"(goal <= {SNAPSHOT_PER_TABLE_MS:.0f} ms: "
          f"{'PASS' if out['pass'] else 'MISS'})", flush=True)
    return out


class LiveStream:
    """A StreamEngine on a thread; ``wait_changes(k)`` returns when the checkpoint covers k changes."""

    def __init__(self, cfg) -> None:
        self.cond = threading.Condition()
        self.changes = 0
        self.batches: list[tuple[float, int, int]] = []  # (when, changes so far, table commits so far)
        self.engine = StreamEngine(cfg, progress=self._progress)
        # (tables, seconds, CPU seconds of this process) of each batch's table commits
        self.applies: list[tuple[int, float, float]] = []
        apply = self.engine.committer.apply

        def timed_apply(batch, offset):
            t0, c0 = time.perf_counter(), process_cpu_s()
            commits = apply(batch, offset)
            self.applies.append((len(commits), time.perf_counter() - t0, process_cpu_s() - c0))
            return commits
        self.engine.committer.apply = timed_apply
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.engine.run()
        except BaseException as e:  # noqa: BLE001 - surfaced by wait_changes
            self.error = e
        with self.cond:
            self.cond.notify_all()

    def _progress(self, summary: StreamSummary, _offset) -> None:
        with self.cond:
            self.changes = summary.changes
            self.batches.append((time.time(), summary.changes, summary.commits))
            self.cond.notify_all()

    def wait_changes(self, k: int, timeout: float = 300) -> float:
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.changes < k:
                if self.error is not None or not self.thread.is_alive():
                    raise RuntimeError(f"the stream stopped: {self.error!r}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.changes} of {k} changes visible after {timeout} s")
                self.cond.wait(0.5)
            return self.batches[-1][0]

    def stop(self) -> None:
        self.engine.request_stop("bench done")
        self.thread.join(60)


def process_cpu_s() -> float:
    """User + system CPU seconds of this process (the engine's threads; its reader is a child process)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def insert_round(server: LocalMariaDB, db: str, tables: list[str], first_id: int, per_table: int,
                 transactions: int) -> float:
    """``transactions`` transactions, each inserting ``per_table`` rows into every table; the time
    (time.time) the last COMMIT returned."""
    conn = server.connect()
    with conn, conn.cursor() as cur:
        conn.select_db(db)
        for k in range(transactions):
            lo = first_id + k * per_table
            for t in tables:
                cur.execute(f"INSERT INTO `{db}`.`{t}` SELECT {VALUES} FROM seq_{lo}_to_{lo + per_table - 1}")
            conn.commit()
        return time.time()


def measure_stream(server: LocalMariaDB, work: Path, n: int, start: tuple[str, int], args) -> dict:
    out = {}
    tables = {MANY: table_names(n), ONE: ["t"]}
    for what, db in (("one", ONE), ("many", MANY)):
        config = write_config(server, work / f"stream-{what}.yaml", f"bench_many_stream_{what}",
                              work / f"lake-stream-{what}", db, start)
        cfg = parse_config({**yaml.safe_load(config.read_text()),
                            "source": {**yaml.safe_load(config.read_text())["source"], "password": server.password}})
        live = LiveStream(cfg)
        try:
            per_table = 1 if what == "many" else n  # the same rows: one per table, or all N in one table
            base = n * args.rows + 1  # above every loaded id of either database
            insert_round(server, db, tables[db], base, per_table, 1)  # warm-up: the Delta tables are created
            t0 = time.time()
            live.wait_changes(n)
            warm = live.batches[-1][0] - t0
            before = len(live.batches)
            committed = insert_round(server, db, tables[db], base + per_table, per_table, args.transactions)
            seen = live.wait_changes(n * (args.transactions + 1))
            batches = live.batches[before:]
            applies = live.applies[-len(batches):]
        finally:
            live.stop()
        commits = batches[-1][2] - live.batches[before - 1][2]
        counts = {t: DeltaTable(str(work / f"lake-stream-{what}" / db / t)).to_pyarrow_dataset().count_rows()
                  for t in tables[db]}
        want = per_table * (args.transactions + 1)  # the fresh sink holds only what was streamed
        wrong = {t: c for t, c in counts.items() if c != want}
        if wrong:
            some = dict(list(wrong.items())[:5])
            raise AssertionError(f"stream ({what}): Delta rows differ from MySQL's {want}: {some}")
        slowest = max(seconds for _, seconds, _ in applies)
        # CPU per table commit: what the batch costs whatever else runs on the machine
        cpu_ms = [round(cpu / max(1, tables) * 1000, 2) for tables, _, cpu in applies]
        out[what] = {"lag_s": seen - committed, "batches": len(batches), "table_commits": commits,
                     "batch_commit_s": [round(seconds, 3) for _, seconds, _ in applies],
                     "slowest_batch_commit_s": slowest, "cpu_ms_per_table_commit": cpu_ms, "warmup_batch_s": warm,
                     "load": os.getloadavg()[0]}
        print(f"  stream {what:>4}: lag from the last COMMIT to its checkpoint {seen - committed:6.2f} s over "
              f"{len(batches)} batch(es), {commits} table commits, a batch's table commits took "
              f"{', '.join(f'{s:.2f}' for _, s, _ in applies)} s (CPU per table commit "
              f"{', '.join(f'{c:.2f}' for c in cpu_ms)} ms); warm-up batch (tables created) {warm:.2f} s; "
              f"load {out[what]['load']:.1f}", flush=True)
    out["pass"] = out["many"]["slowest_batch_commit_s"] <= STREAM_LAG_S
    print(f"  stream, a batch touching {n} tables committed in {out['many']['slowest_batch_commit_s']:.2f} s "
          f"(goal <= {STREAM_LAG_S:.0f} s: {'PASS' if out['pass'] else 'MISS'}); lag {out['many']['lag_s']:.2f} s",
          flush=True)
    return out


def measure_defs(server: LocalMariaDB, work: Path, n: int, args) -> dict:
    out = {}
    for what, count in (("few", min(DEFS_BASELINE_TABLES, n)), ("many", n)):
        # the snapshot's lake when it ran: loading reads each table's Delta schema
        config = write_config(server, work / f"defs-{what}.yaml", "bench_many_snap_many", work / "lake-many", MANY)
        raw = yaml.safe_load(config.read_text())
        raw["source"]["tables"] = [rf"{MANY}\.{t}" for t in table_names(count)] if what == "few" else raw["source"][
            "tables"]
        config.write_text(yaml.safe_dump(raw))
        cfg = parse_config({**raw, "source": {**raw["source"], "password": server.password}})
        catalog = work / f"defs-{what}.tables.json"
        discover(cfg).write(catalog)
        script = work / "defs.py"
        script.write_text(DEFS_SCRIPT)
        cmd = profiled([sys.executable, str(script), str(config), str(catalog)], args.profile, f"defs-{what}")
        cpu0 = children_cpu_s()
        seconds, stdout, rss = timed_process(cmd, server.password, f"definitions ({what})")
        cpu = children_cpu_s() - cpu0
        assets = int(stdout.split()[0])
        if assets != count:
            raise AssertionError(f"definitions ({what}): {assets} table assets, expected {count}")
        out[what] = {"tables": count, "seconds": seconds, "cpu_s": cpu, "peak_rss_mb": rss,
                     "load": os.getloadavg()[0]}
        print(f"  definitions of {count:>5} tables: {seconds:6.2f} s, CPU {cpu:6.2f} s, peak RSS {rss or 0:.0f} MB, "
              f"load {out[what]['load']:.1f}", flush=True)
    many, few = out["many"], out["few"]
    out["per_table_ms"] = (many["seconds"] - few["seconds"]) / max(1, many["tables"] - few["tables"]) * 1000
    extra = max(1, many["tables"] - few["tables"])
    out["per_table_mb"] = ((many["peak_rss_mb"] or 0) - (few["peak_rss_mb"] or 0)) / extra
    # The goal is set at 2,000 tables: fewer are projected there from the cost per table.
    more = max(0, 2000 - many["tables"])
    out["projected_2000_s"] = many["seconds"] + more * out["per_table_ms"] / 1000
    out["projected_2000_mb"] = (many["peak_rss_mb"] or 0) + more * out["per_table_mb"]
    out["pass"] = out["projected_2000_s"] <= DEFS_S and out["projected_2000_mb"] <= DEFS_MB
    print(f"  definitions per table: {out['per_table_ms']:.1f} ms, {out['per_table_mb']:.2f} MB; 2,000 tables "
          f"{out['projected_2000_s']:.1f} s, {out['projected_2000_mb']:.0f} MB (goal <= {DEFS_S:.0f} s and "
          f"<= {DEFS_MB:.0f} MB: {'PASS' if out['pass'] else 'MISS'})", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", type=int, default=500)
    ap.add_argument("--rows", type=int, default=100, help="rows per table")
    ap.add_argument("--transactions", type=int, default=20, help="stream: transactions touching every table")
    ap.add_argument("--only", choices=("snapshot", "stream", "defs"), action="append")
    ap.add_argument("--profile", type=Path, help="cProfile the subprocesses into this folder")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    compile_product()  # whole processes start as an installed copy does (bench/bytecode.py)
    only = set(args.only or ("snapshot", "stream", "defs"))
    work = Path(tempfile.mkdtemp(prefix="binlake-many-bench-"))
    server = LocalMariaDB(server_id=1)
    doc: dict = {"tables": args.tables, "rows_per_table": args.rows, "nproc": os.cpu_count(),
                 "loadavg_start": [round(x, 2) for x in os.getloadavg()]}
    print(f"{args.tables} tables of {args.rows} rows; nproc {os.cpu_count()}, load {os.getloadavg()[0]:.1f}",
          flush=True)
    try:
        server.start()
        t0 = time.perf_counter()
        create_tables(server, args.tables, args.rows)
        conn = server.connect()
        with conn, conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            file, pos = cur.fetchone()[:2]
        print(f"  created and loaded in {time.perf_counter() - t0:.1f} s", flush=True)
        if "snapshot" in only:
            doc["snapshot"] = measure_snapshot(server, work, args.tables, args)
        if "stream" in only:
            doc["stream"] = measure_stream(server, work, args.tables, (file, int(pos)), args)
        if "defs" in only:
            doc["defs"] = measure_defs(server, work, args.tables, args)
    finally:
        server.cleanup()
    doc["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
