"""Online backfill benchmark: throughput against the initial snapshot of the same table, and
the stream's lag for other tables while a backfill runs.

    .venv/bin/python bench/backfill.py [--rows N] [--chunk-size N] [--spark-min-chunks N]
                                       [--group-rows N] [--lag-seconds S]

``--chunk-size`` defaults to binlake's own default (``source.snapshot.chunk_size``), what a
user gets; ``--spark-min-chunks`` and ``--group-rows`` set
``source.snapshot.backfill_spark_min_chunks`` and ``backfill_group_rows`` (default: binlake's).

One run starts a throwaway MariaDB (devtools.local_mariadb), loads bench/snapshot.py's
7-column table (N rows, default 1,000,000) and bench/stream.py's latency table, and:

1. Throughput (whole processes, as a user runs them): ``binlake snapshot`` on a fresh lake
   (every chunk read where ``source.snapshot.runner`` puts it) is the baseline; after ``binlake stream --until now``,
   ``binlake backfill --table bench.t`` (no stream running: it streams until the backfill is
   done) reads the same table again: Delta already holds every row, so nothing is written.
   Then the case with every row written: a second pipeline that captured only the latency
   table has ``bench.t`` added to its config; ``binlake stream --until now`` finds it and
   backfills it into an empty Delta table (appends). Reported: seconds and rows/s of each,
   the ratio of each backfill's rate to the snapshot's (goal >= 0.7), whole process and
   in session (the snapshot's own timer against the request's first "running" and "done"
   rows).
2. Lag: ``binlake stream`` runs as a subprocess; bench/stream.py's paced writer inserts
   2,000 rows/s into ``lat.events``; once the stream is up, a backfill of ``bench.t`` is
   requested (``--no-wait``) and the writer keeps writing while it runs. Latency = when a
   row became visible to a Delta reader (a poller every 50 ms) minus its MySQL COMMIT, for
   rows committed while the backfill ran; p50/p99/max reported (goal p99 <= 5 s).

Figures go to bench/out/backfill.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from bench.bytecode import compile_product  # noqa: E402
from bench.snapshot import DB, TABLE, load_table  # noqa: E402
from bench.stream import DDL, LAT_DB, LAT_TABLE, DeltaPoller, PacedWriter, percentile  # noqa: E402
from cdc_core.chunks.incremental import BackfillState  # noqa: E402
from cdc_core.config import SnapshotConfig, load_config  # noqa: E402
from devtools.local_mariadb import LocalMariaDB  # noqa: E402
from pipelines.lake.control_store import ControlStore  # noqa: E402

OUT = REPO / "bench" / "out" / "backfill.json"
PASSWORD_VAR = "BINLAKE_BENCH_PASSWORD"
TARGET_RATIO, TARGET_P99_S = 0.7, 5.0


def cli(config: Path, password: str, *args: str, timeout: float = 1800) -> tuple[float, str]:
    """Seconds of one ``binlake`` process and its output; fails on a non-zero exit."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "pipelines.cli", *args, "-c", str(config)], cwd=REPO,
                       capture_output=True, text=True, timeout=timeout, env={**os.environ, PASSWORD_VAR: password})
    if r.returncode != 0:
        raise AssertionError(f"binlake {' '.join(args)} exited {r.returncode}: {r.stdout[-2000:]}{r.stderr[-2000:]}")
    return time.perf_counter() - t0, r.stdout


def in_session_seconds(store: ControlStore, request_id: str) -> float:
    """From the request's first "running" row to its "done" row."""
    rows = [r for r in store._read("backfill_requests") if r["id"] == request_id]
    running = min(r["updated_at"] for r in rows if r["state"] == BackfillState.RUNNING)
    done = max(r["updated_at"] for r in rows if r["state"] == BackfillState.DONE)
    return (done - running).total_seconds()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--chunk-size", type=int, default=SnapshotConfig().chunk_size)
    ap.add_argument("--spark-min-chunks", type=int, help="source.snapshot.backfill_spark_min_chunks")
    ap.add_argument("--group-rows", type=int, help="source.snapshot.backfill_group_rows")
    ap.add_argument("--lag-seconds", type=float, default=20.0, help="writing time during the lag backfill")
    args = ap.parse_args(argv)
    compile_product()  # whole processes start as an installed copy does (bench/bytecode.py)
    work = Path(tempfile.mkdtemp(prefix="binlake-backfill-bench-"))
    server = LocalMariaDB(server_id=1)
    snapshot_cfg = {"chunk_size": args.chunk_size,
                    **({} if args.spark_min_chunks is None else {"backfill_spark_min_chunks": args.spark_min_chunks}),
                    **({} if args.group_rows is None else {"backfill_group_rows": args.group_rows})}
    doc: dict = {"rows": args.rows, "snapshot": snapshot_cfg}
    try:
        server.start()
        load_table(server, args.rows)
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{LAT_DB}`")
            cur.execute(DDL.format(db=LAT_DB, table=LAT_TABLE))
        def write_config(path: Path, name: str, tables: list[str], server_id: int, lake: str = "lake") -> Path:
            path.write_text(yaml.safe_dump({
                "pipeline": {"name": name},
                "source": {"host": server.host, "port": server.port, "user": server.user,
                           "password": "${" + PASSWORD_VAR + "}", "server_id": server_id, "tables": tables,
                           "snapshot": snapshot_cfg,
                           **({"startup": {"mode": "latest"}} if lake != "lake" else {})},
                "sink": {"path": str(work / lake)}}))
            return path

        both = [rf"{DB}\.{TABLE}", rf"{LAT_DB}\.{LAT_TABLE}"]
        config = write_config(work / "binlake.yaml", "bench_backfill", both, 7100)
        os.environ[PASSWORD_VAR] = server.password
        store = ControlStore.of(load_config(str(config)))
        full = f"{DB}.{TABLE}"

        # 1. throughput
        snap_s, snap_out = cli(config, server.password, "snapshot")
        m = [line for line in snap_out.splitlines() if "snapshot of" in line]
        snap_session = float(m[0].split("(")[1].split("s)")[0]) if m else float("nan")
        cli(config, server.password, "stream", "--until", "now")
        back_s, _ = cli(config, server.password, "backfill", "--table", full)
        req = next(r for r in store.backfills() if r.table == full)
        assert req.state == BackfillState.DONE, req
        back_session = in_session_seconds(store, req.id)
        # every row written: bench.t enters the capture of a pipeline that streamed lat.events only
        added = write_config(work / "added.yaml", "bench_backfill_added", [rf"{LAT_DB}\.{LAT_TABLE}"], 7200,
                             "lake-added")
        cli(added, server.password, "stream", "--until", "now")  # first start (mode latest): lat only
        write_config(added, "bench_backfill_added", both, 7200, "lake-added")
        new_s, _ = cli(added, server.password, "stream", "--until", "now")
        store_added = ControlStore.of(load_config(str(added)))
        new = next(r for r in store_added.backfills() if r.table == full)
        assert new.state == BackfillState.DONE, new
        new_session = in_session_seconds(store_added, new.id)
        doc["throughput"] = {
            "snapshot_s": snap_s, "snapshot_in_session_s": snap_session, "backfill_s": back_s,
            "backfill_in_session_s": back_session, "chunks": len(req.chunks),
            "ratio_whole_process": snap_s / back_s, "ratio_in_session": snap_session / back_session,
            "added_table_s": new_s, "added_table_in_session_s": new_session,
            "added_ratio_whole_process": snap_s / new_s, "added_ratio_in_session": snap_session / new_session}
        t = doc["throughput"]
        print(f"1. throughput, {args.rows:,} rows, {snapshot_cfg} ({len(req.chunks)} chunks)")
        print(f"   binlake snapshot   {snap_s:7.2f} s ({args.rows / snap_s:,.0f} rows/s), in session "
              f"{snap_session:.2f} s")
        print(f"   binlake backfill   {back_s:7.2f} s ({args.rows / back_s:,.0f} rows/s), request running -> done "
              f"{back_session:.2f} s")
        print(f"   backfill/snapshot rate: whole process {t['ratio_whole_process']:.2f}, in session "
              f"{t['ratio_in_session']:.2f} (goal >= {TARGET_RATIO})")
        print(f"   added table (every row appended): stream --until now {new_s:.2f} s, request running -> done "
              f"{new_session:.2f} s; rate vs snapshot: whole process {t['added_ratio_whole_process']:.2f}, "
              f"in session {t['added_ratio_in_session']:.2f}")

        # 2. lag of another table while a backfill runs
        log = open(work / "stream.log", "wb")
        proc = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "stream", "-c", str(config)], cwd=REPO,
                                stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy(), start_new_session=True)
        poller = DeltaPoller(str(work / "lake" / LAT_DB / LAT_TABLE), 0.05).start()
        writer = PacedWriter(server, 20, 100)
        try:
            warm = writer.transaction()
            if not poller.wait_for(lambda: warm, 120):
                raise RuntimeError("the stream did not start")
            _, out = cli(config, server.password, "backfill", "--table", full, "--no-wait")
            rid = out.split()[1]
            started = time.time()
            ids, write_s = writer.run(args.lag_seconds)
            while next(r for r in store.backfills() if r.id == rid).state != BackfillState.DONE:
                ids += writer.transaction()
                time.sleep(0.01)
            finished = time.time()
            poller.wait_for(lambda: ids, 60)
        finally:
            poller.stop()
            writer.close()
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(60)
        during = sorted(poller.visible[i] - writer.committed[i] for i in ids
                        if i in poller.visible and started <= writer.committed[i] <= finished)
        missing = sum(1 for i in ids if i not in poller.visible)
        doc["lag"] = {"rows_during_backfill": len(during), "backfill_s": finished - started, "missing": missing,
                      "p50_s": percentile(during, 50), "p99_s": percentile(during, 99), "max_s": during[-1]}
        lag = doc["lag"]
        print(f"2. lag of lat.events (2,000 rows/s) during a backfill of {full} ({finished - started:.1f} s, "
              f"{len(during):,} rows): p50 {lag['p50_s']:.2f} s, p99 {lag['p99_s']:.2f} s, max {lag['max_s']:.2f} s "
              f"(goal p99 <= {TARGET_P99_S} s); {missing} rows never seen")
    finally:
        server.stop()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=2, default=str))
    print(f"figures written to {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
