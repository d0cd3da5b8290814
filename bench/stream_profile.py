"""Where the stream's CPU goes: CPU seconds per million rows by stage of a catch-up.

    .venv/bin/python bench/stream_profile.py [--rows N] [--workers 1,2] [--py-spy PATH] [--rate HZ]

One run starts a throwaway MariaDB (devtools.local_mariadb) and writes a backlog of N
inserts with bench/stream.py's generator (tables ``bench.t1..t3``, 7 columns, multi-row
INSERTs of 100-1000 rows). Then for each worker count W, ``binlake stream -c FILE --until
now`` from the backlog's start into a fresh lake (bench/catchup.py's configuration) runs twice,
with the code of each checkout ``--code`` names (PYTHONPATH; default this one) in turn:

  (1) plain: the CPU seconds of the binlake process tree (wait4) and of mariadbd, wall seconds;
  (2) under py-spy (``record --subprocesses --threads --gil``: a thread holding the GIL), a sampling profiler in a
      process of its own: the stream runs unmodified), whose samples of running Python threads
      are sorted into stages by the innermost frame a rule in ``STAGES`` names.

A stage's CPU seconds are its share of the sampled CPU times run (1)'s binlake CPU (sampling
rates drift; shares do not). Threads no Python frame runs in (delta-rs's Rust runtime, Arrow's
pool) are not sampled: what run (2)'s sampled seconds miss of run (1)'s CPU is reported as
"not in a Python thread". The stages are also given for the engine process alone (the samples
of the process py-spy started: rows are decoded there since they cross the queue packed).
Figures go to bench/out/stream_profile.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.bytecode import compile_product  # noqa: E402
from bench.catchup import run_stream as catchup_run  # noqa: E402
from bench.stream import create_tables, generate_backlog  # noqa: E402
from devtools.local_mariadb import LocalMariaDB  # noqa: E402

OUT = REPO / "bench" / "out" / "stream_profile.json"

# (stage, substrings of a frame "function (file:line)"): a sample goes to the stage of its
# innermost frame that one of these names; the first rule a frame matches wins.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("idle waits (GIL held at the moment)", ("Condition.wait", "Event.wait", "select (selectors.py", "_poll",
                                             "Connection._send (", "Connection._recv (", "rich/live.py")),
    ("socket reads, packet framing", ("pymysql/connections.py", "socket.py", "pymysql/protocol.py",
                                      "_read_packet", "_read_bytes")),
    ("row decoding", ("row_images.py", "binlog/columnar.py", "cdc_core/types/", "binlog/columns.py",
                      "pymysqlreplication/row_event.py",
                      "decoder.py")),
    ("event parsing", ("pymysqlreplication/", "binlog/event_loop.py", "binlog/event_source.py",
                       "binlog/mysql_gtid.py")),
    ("queue: pickling (reader), unpickling (engine)", ("pickle", "Pickler", "Queue.get (multiprocessing",
                                                       "multiprocessing/", "stream/reader.py", "binlog/reader.py",
                                                       "queue.py", "dataclasses.py")),
    ("Delta write (Python side)", ("write_deltalake", "deltalake/", "lake/apply.py", "lake/tables.py")),
    ("control/offset writes", ("control_store.py", "lake/offsets.py", "stream/state.py", "stream/commit.py")),
    ("Arrow building", ("pyarrow/", "table_commit.py", "lake/conform.py", "arrow")),
    ("folding (cdc_core/batch)", ("cdc_core/batch/",)),
    ("engine loop, other", ("pipelines/", "cdc_core/")),
    ("start-up, imports", ("importlib", "<module>")),
)


def stage_of(frames: list[str]) -> str:
    """The stage of one sampled stack (outermost frame first)."""
    for frame in reversed(frames):
        for stage, needles in STAGES:
            if any(n in frame for n in needles):
                return stage
    return "other"


def parse_raw(path: Path) -> tuple[Counter, Counter, Counter]:
    """py-spy's raw (collapsed) output → samples by stage, by process role (engine, reader), and the
    engine process's by stage."""
    by_stage: Counter = Counter()
    by_process: Counter = Counter()
    engine: Counter = Counter()
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        processes = [f for f in frames if f.startswith("process ")]
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        stage = stage_of(frames)
        by_stage[stage] += int(count)
        by_process["engine" if len(processes) <= 1 else "reader/decode worker"] += int(count)
        if len(processes) <= 1:
            engine[stage] += int(count)
    return by_stage, by_process, engine


def run_stream(server: LocalMariaDB, backlog, work: Path, workers: int, tag: str,
               profiler: list[str] | None, checkout: Path) -> dict:
    """bench/catchup.py's run of ``binlake stream --until now`` with ``checkout``'s code, under ``profiler``."""
    r = catchup_run(server, backlog, work, workers, 0, argparse.Namespace(chunk_mb=16.0), tuple(profiler or ()),
                    {"PYTHONPATH": str(checkout)}, f"-{tag}")
    return {"seconds": r["seconds"], "binlake_cpu_s": r["cpu_s"]["binlake process tree"],
            "mariadbd_cpu_s": r["cpu_s"]["mariadbd"], "load": r["load_after"]}


def profile(server: LocalMariaDB, backlog, work: Path, workers: int, checkout: Path, args: argparse.Namespace) -> dict:
    tag = f"{checkout.name}-w{workers}"
    plain = run_stream(server, backlog, work, workers, f"{tag}-plain", None, checkout)
    raw_out = work / f"{tag}.txt"
    spy = [args.py_spy, "record", "--subprocesses", "--threads", "--gil", "--format", "raw",
           "-r", str(args.rate), "-o", str(raw_out), "--"]
    profiled = run_stream(server, backlog, work, workers, f"{tag}-spy", spy, checkout)
    by_stage, by_process, engine = parse_raw(raw_out)
    sampled = sum(by_stage.values())
    sampled_s = sampled / args.rate
    per_m = 1e6 / backlog.changes
    # run (2)'s CPU less py-spy's own (not known apart: the whole tree) is not used; run (1)'s CPU is split
    python_share = min(1.0, sampled_s / plain["binlake_cpu_s"]) if plain["binlake_cpu_s"] else 0.0
    stages = {s: plain["binlake_cpu_s"] * python_share * n / sampled * per_m for s, n in by_stage.most_common()}
    stages["not in a Python thread (Rust/Arrow pools)"] = plain["binlake_cpu_s"] * (1 - python_share) * per_m
    engine_stages = {s: plain["binlake_cpu_s"] * python_share * n / sampled * per_m for s, n in engine.most_common()}
    return {"checkout": str(checkout), "workers": workers, "plain": plain, "profiled": profiled, "samples": sampled,
            "sampled_cpu_s": sampled_s, "cpu_s_per_million_rows": stages,
            "engine_cpu_s_per_million_rows": engine_stages,
            "binlake_cpu_s_per_million_rows": plain["binlake_cpu_s"] * per_m,
            "mariadbd_cpu_s_per_million_rows": plain["mariadbd_cpu_s"] * per_m,
            "rows_per_s": backlog.changes / plain["seconds"],
            "samples_by_process": dict(by_process)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--py-spy", default=shutil.which("py-spy") or "py-spy", help="the py-spy executable")
    ap.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    ap.add_argument("--code", default=str(REPO),
                    help="checkouts whose binlake runs (their PYTHONPATH), comma-separated: each profiled in turn")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    compile_product()  # whole processes start as an installed copy does (bench/bytecode.py)
    print(f"load average {os.getloadavg()}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="binlake-profile-bench-"))
    server = LocalMariaDB(server_id=1)
    try:
        server.start()
        create_tables(server)
        backlog = generate_backlog(server, args.rows, (1.0, 0.0, 0.0))
        print(f"{backlog.changes:,} inserts, {backlog.binlog_bytes / 2**20:,.1f} MiB of binlog", flush=True)
        results = [profile(server, backlog, work, int(w), Path(c), args)
                   for w in args.workers.split(",") for c in args.code.split(",")]
        names = list(dict.fromkeys(s for r in results for s in r["cpu_s_per_million_rows"]))
        print("\nCPU seconds per million rows by stage (binlake process tree; run (1)'s CPU, run (2)'s shares):")
        print(f"  {'stage':<45}" + "".join(f"{Path(r['checkout']).name[:8] + ' w' + str(r['workers']):>12}"
                                            for r in results))
        for s in names:
            print(f"  {s:<45}" + "".join(f"{r['cpu_s_per_million_rows'].get(s, 0.0):>12.2f}" for r in results))
        print(f"  {'binlake total':<45}" + "".join(f"{r['binlake_cpu_s_per_million_rows']:>12.2f}" for r in results))
        print("  of which the engine process:")
        for s in names:
            print(f"    {s:<43}" + "".join(f"{r['engine_cpu_s_per_million_rows'].get(s, 0.0):>12.2f}" for r in results))
        print(f"    {'engine total':<43}" + "".join(f"{sum(r['engine_cpu_s_per_million_rows'].values()):>12.2f}"
                                              for r in results))
        print(f"  {'mariadbd':<45}" + "".join(f"{r['mariadbd_cpu_s_per_million_rows']:>12.2f}" for r in results))
        print(f"  {'rows/s (run 1)':<45}" + "".join(f"{r['rows_per_s']:>12,.0f}" for r in results))
        print(f"  {'wall s (run 1)':<45}" + "".join(f"{r['plain']['seconds']:>12.2f}" for r in results))
        print(f"load average now {os.getloadavg()}")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"rows": backlog.changes, "results": results}, indent=2, default=str) + "\n")
        if os.environ.get("BINLAKE_PROFILE_KEEP"):
            for p in work.glob("*.txt"):
                shutil.copy(p, args.out.parent / f"{args.out.stem}_{p.name}")
        return 0
    finally:
        server.cleanup()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
