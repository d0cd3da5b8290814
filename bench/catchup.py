"""Catch-up benchmark: a backlog decoded by several reader processes
(``source.parallel_decode``) against the raw single-reader decode loop.

    .venv/bin/python bench/catchup.py [--rows N] [--workers 1,2,3] [--repeat K] [--mix I/U/D] [--chunk-mb MB]

One run starts a throwaway MariaDB (devtools.local_mariadb) and writes a backlog of N
row changes with bench/stream.py's generator (tables ``bench.t1..t3``, 7 columns,
transactions of 100-1000 rows, inserts as multi-row INSERTs; by default inserts only,
--mix for updates and deletes) between two SHOW MASTER STATUS positions. Then, K times,
alternating:

  (a) the raw python-mysql-replication loop over that range in this process
      (bench/stream.py's run_raw_reader: one reader decoding every row, nothing else);
  (b) for each worker count W: ``binlake stream -c FILE --until now`` as a subprocess
      (whole process: start-up, cutting the backlog, decoding, Delta commits) from the
      backlog's start into a fresh lake, with ``source.parallel_decode`` workers W,
      min_backlog_mb 0 (always cut) and chunk_mb --chunk-mb; W = 1 is the single reader
      (no cutting). Delta row counts must equal MySQL's.

Reported per W: median seconds, rows/s, the ratio (a)/(b) seconds (> 1: faster than the
raw single reader; goal 3 is >= 1.25) and the CPU seconds of the binlake process tree
(wait4) and of mariadbd; the load average before and after each run (on 2 shared cores
the ratios move with the machine's other work). Figures go to bench/out/catchup.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.bytecode import compile_product  # noqa: E402
from bench.stream import (  # noqa: E402
    DB,
    PASSWORD_ENV,
    Backlog,
    binlake_command,
    cpu_delta,
    cpu_snapshot,
    create_tables,
    delta_counts,
    generate_backlog,
    parse_mix,
    run_raw_reader,
    stream_config,
    tail,
    wait_reaping,
    write_config_file,
)
from devtools.local_mariadb import LocalMariaDB  # noqa: E402

OUT = REPO / "bench" / "out" / "catchup.json"
GOAL = 1.25
SERVER_ID_RAW, SERVER_ID_STREAM = 7000, 7100  # the stream's decode workers use +2 … +1+W


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run_stream(server: LocalMariaDB, backlog: Backlog, work: Path, workers: int, run: int,
               args: argparse.Namespace, prefix: tuple[str, ...] = (), env: dict[str, str] | None = None,
               tag: str = "") -> dict:
    """(b) ``binlake stream --until now`` over the backlog into a fresh lake with ``workers``; its
    command after ``prefix`` (a profiler), with ``env`` added to the environment (bench/stream_profile.py)."""
    lake, name = work / f"lake-w{workers}-{run}{tag}", f"bench_catchup_w{workers}_{run}{tag}"
    raw = stream_config(server, lake, name, SERVER_ID_STREAM + 10 * run + workers, DB, backlog.start,
                        argparse.Namespace(max_batch_rows=None, max_batch_seconds=None,
                                           catchup_batch_rows=None))
    raw["source"]["parallel_decode"] = {"workers": workers, "min_backlog_mb": 0, "chunk_mb": args.chunk_mb}
    config = work / f"{name}.yaml"
    write_config_file(config, raw)
    log_path = work / f"{name}.log"
    load_before = _load()
    cpu0 = cpu_snapshot(server)
    t0 = time.perf_counter()
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen([*prefix, *binlake_command(), "stream", "-c", str(config), "--until", "now"],
                                stdout=log_file, stderr=subprocess.STDOUT, cwd=REPO,
                                env={**os.environ, **(env or {}), PASSWORD_ENV: server.password})
        code, usage = wait_reaping(proc)
    seconds = time.perf_counter() - t0
    cpu = cpu_delta(cpu0, cpu_snapshot(server))
    if code:
        raise AssertionError(f"binlake stream (workers {workers}) exited {code}:\n{tail(log_path, 20)}")
    counts = delta_counts(lake, DB, backlog.tables)
    if counts != backlog.mysql_rows:
        raise AssertionError(f"workers {workers}: Delta rows {counts} != MySQL rows {backlog.mysql_rows}")
    shutil.rmtree(lake, ignore_errors=True)
    return {"seconds": seconds, "rows_per_s": backlog.changes / seconds, "load_before": load_before,
            "load_after": _load(), "cpu_s": {"binlake process tree": usage.ru_utime + usage.ru_stime,
                                             "mariadbd": cpu["mariadbd"]}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="row changes in the backlog")
    ap.add_argument("--workers", default="1,2,3", help="worker counts to run, comma-separated")
    ap.add_argument("--repeat", type=int, default=1, help="alternating repeats (medians)")
    ap.add_argument("--mix", type=parse_mix, default=(1.0, 0.0, 0.0), metavar="I/U/D",
                    help="percent of transactions that insert/update/delete (default 100/0/0)")
    ap.add_argument("--chunk-mb", type=float, default=16.0, help="source.parallel_decode.chunk_mb")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    compile_product()  # whole processes start as an installed copy does (bench/bytecode.py)
    workers = [int(w) for w in args.workers.split(",")]
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    env = {"nproc": os.cpu_count(), "loadavg_start": _load(), "started_at": dt.datetime.now(dt.UTC).isoformat()}
    print(f"machine: nproc {env['nproc']}, load average {env['loadavg_start']}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="binlake-catchup-bench-"))
    server = LocalMariaDB(server_id=1)
    try:
        server.start()
        create_tables(server)
        print(f"generating {args.rows:,} row changes ...", flush=True)
        backlog = generate_backlog(server, args.rows, args.mix)
        mib = backlog.binlog_bytes / 2**20
        print(f"  {backlog.changes:,} changes in {backlog.transactions:,} transactions in {backlog.seconds:.1f} s "
              f"({mib:,.1f} MiB of binlog)", flush=True)
        runs: dict[str, list[dict]] = {"raw": [], **{f"w{w}": [] for w in workers}}
        for i in range(args.repeat):
            load_before = _load()
            r = run_raw_reader(server, backlog, SERVER_ID_RAW + i)
            runs["raw"].append({**r, "load_before": load_before, "load_after": _load()})
            print(f"  [{i + 1}/{args.repeat}] raw single-reader loop  {r['seconds']:7.2f} s  "
                  f"{r['rows_per_s']:>9,.0f} rows/s  load {load_before[0]:.1f}->{_load()[0]:.1f}", flush=True)
            for w in workers:
                r = run_stream(server, backlog, work, w, i, args)
                runs[f"w{w}"].append(r)
                print(f"  [{i + 1}/{args.repeat}] binlake stream, {w} worker(s) {r['seconds']:7.2f} s  "
                      f"{r['rows_per_s']:>9,.0f} rows/s  load {r['load_before'][0]:.1f}->{r['load_after'][0]:.1f}",
                      flush=True)
        raw_s = statistics.median(r["seconds"] for r in runs["raw"])
        results = {}
        print()
        print(f"Catch-up of {backlog.changes:,} row changes ({mib:,.1f} MiB of binlog), medians of {args.repeat}:")
        print(f"  {'run':<40}{'seconds':>9}{'rows/s':>11}{'raw/run':>9}{'CPU s (binlake, mariadbd)':>28}")
        print(f"  {'raw python-mysql-replication loop':<40}{raw_s:>9.2f}{backlog.changes / raw_s:>11,.0f}"
              f"{1.0:>9.2f}")
        for w in workers:
            s = statistics.median(r["seconds"] for r in runs[f"w{w}"])
            cpu = {k: statistics.median(r["cpu_s"][k] for r in runs[f"w{w}"]) for k in runs[f"w{w}"][0]["cpu_s"]}
            results[w] = {"seconds": s, "rows_per_s": backlog.changes / s, "ratio": raw_s / s, "cpu_s": cpu}
            print(f"  {f'binlake stream --until now, workers {w}':<40}{s:>9.2f}{backlog.changes / s:>11,.0f}"
                  f"{raw_s / s:>9.2f}{cpu['binlake process tree']:>17.1f}, {cpu['mariadbd']:.1f}")
        best = max(results, key=lambda w: results[w]["ratio"])
        ok = results[best]["ratio"] >= GOAL
        print(f"  best: {best} workers, {results[best]['ratio']:.2f}x the raw single reader; goal >= {GOAL}: "
              f"{'PASS' if ok else 'MISS'}; load average now {_load()}")
        doc = {"args": {k: str(v) for k, v in vars(args).items()},
               "env": {**env, "loadavg_end": _load()}, "backlog": backlog.to_dict(),
               "raw": {"seconds": raw_s, "rows_per_s": backlog.changes / raw_s}, "workers": results,
               "runs": runs, "best_workers": best, "goal": GOAL, "pass": ok}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        print(f"  figures written to {args.out}")
        return 0
    finally:
        server.cleanup()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
