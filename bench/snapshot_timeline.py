"""Where the whole process of ``binlake snapshot`` spends its wall time, step by step.

    .venv/bin/python bench/snapshot_timeline.py [--rows N] [--repeat K] [--datadir DIR]

Starts a throwaway MariaDB (``--datadir`` reuses bench/snapshot.py's table, loaded once),
writes a config as bench/snapshot.py's (A) does, and runs ``binlake snapshot -c FILE`` K times
as a subprocess of this script in ``--child`` mode: the CLI itself (``pipelines.cli.run``),
with timestamps taken at its steps by wrappers around the functions that make them (the work
is unchanged). Timestamps count from the process's exec (``/proc/self/stat``); the last one,
the exit, is the parent's ``wait``. The child imports the wrapped modules first, so the
imports the CLI makes lazily are all in one step here. Prints the median of each step and
writes bench/out/snapshot_timeline.json.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
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

OUT = REPO / "bench" / "out" / "snapshot_timeline.json"

# (module, attribute, step name): the step starts and ends with the call
WRAPPED = (
    ("pipelines.cli", "_load", "config load"),
    ("cdc_core.source.validate", "findings", "validation"),
    ("pipelines.snapshot.verify", "finished_snapshot", "finished-snapshot check"),
    ("pipelines.snapshot.driver", "SnapshotJob._run", "job"),
    ("pipelines.snapshot.driver", "plan_tables", "plan"),
    ("pipelines.snapshot.driver", "SnapshotJob._execute", "reads"),
    ("pipelines.snapshot.driver", "SnapshotJob._changed_during_snapshot", "DDL check"),
    ("pipelines.snapshot.driver", "counted", "counts"),
    ("pipelines.cli", "_snapshot_report", "report"),
)

# (step, from mark, to mark) as printed
STEPS = (
    ("interpreter start", None, "interpreter ready"),
    ("imports: pipelines.cli (rich, pydantic config)", "interpreter ready", "cli imported"),
    ("imports: lake, validation, driver (pyarrow, deltalake, ...)", "cli imported", "> config load"),
    ("config load", "> config load", "< config load"),
    ("writer lock, sink check", "< config load", "> validation"),
    ("validation (connect, grants, server settings)", "> validation", "< validation"),
    ("finished-snapshot check", "> finished-snapshot check", "< finished-snapshot check"),
    ("job start: lake at start, captured tables", "> job", "> plan"),
    ("plan: baseline schema commit, chunk key, plan commit", "> plan", "< plan"),
    ("reads: to the first commit", "> reads", "first commit"),
    ("reads: the rest (the progress bar's end)", "first commit", "< reads"),
    ("DDL check", "< reads", "< DDL check"),
    ("tail: MySQL and Delta counts, verified commit", "< DDL check", "< counts"),
    ("report", "< counts", "os._exit"),
    ("exit: os._exit to the parent's wait", "os._exit", "exited"),
)


def child(config: str, out: str) -> None:
    """Run ``binlake snapshot -c config`` in this process, its marks written to ``out`` at exit."""
    clock_ticks = os.sysconf("SC_CLK_TCK")
    with open("/proc/self/stat") as f:
        started = int(f.read().rsplit(")", 1)[1].split()[19]) / clock_ticks
    with open("/proc/uptime") as f:
        t0 = time.perf_counter() - (float(f.read().split()[0]) - started)
    marks: dict[str, float] = {}

    def mark(name: str) -> None:
        marks.setdefault(name, time.perf_counter() - t0)

    mark("interpreter ready")
    import pipelines.cli as cli

    mark("cli imported")
    for module, attr, step in WRAPPED:
        owner = importlib.import_module(module)
        *path, name = attr.split(".")
        for p in path:
            owner = getattr(owner, p)
        fn = getattr(owner, name)

        def wrapper(*a, _fn=fn, _step=step, **kw):
            mark(f"> {_step}")
            try:
                return _fn(*a, **kw)
            finally:
                mark(f"< {_step}")

        setattr(owner, name, functools.wraps(fn)(wrapper))
    from pipelines.snapshot.driver import SnapshotJob

    commit_batch = SnapshotJob._commit_batch

    def first_commit(self, *a, **kw):
        mark("first commit")
        return commit_batch(self, *a, **kw)

    SnapshotJob._commit_batch = first_commit
    exit_ = os._exit

    def leave(code: int) -> None:
        mark("os._exit")
        times = os.times()
        Path(out).write_text(json.dumps({"marks": marks, "cpu_s": times.user + times.system}))
        exit_(code)

    os._exit = leave
    sys.argv = ["binlake", "snapshot", "-c", config]
    cli.run()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--parallelism", type=int, default=4)
    ap.add_argument("--datadir", type=Path, help="keep MariaDB's data directory here (bench/snapshot.py's)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--child", nargs=2, metavar=("CONFIG", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0

    from bench.snapshot import PASSWORD_VAR, load_table, loaded_rows, write_cli_config
    from devtools.local_mariadb import LocalMariaDB

    work = Path(tempfile.mkdtemp(prefix="binlake-timeline-bench-"))
    if args.datadir:
        args.datadir.mkdir(parents=True, exist_ok=True)
    server = LocalMariaDB(server_id=1, base_dir=args.datadir)
    runs = []
    try:
        server.start()
        held = loaded_rows(server)
        if held is None:
            load_table(server, args.rows)
        elif held != args.rows:
            raise SystemExit(f"{args.datadir} holds a table of {held:,} rows, not {args.rows:,}")
        env = {**os.environ, PASSWORD_VAR: server.password,
               "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
        for i in range(args.repeat):
            lake = work / f"lake-{i}"
            config = write_cli_config(server, work / f"binlake-{i}.yaml", f"bench_timeline_{i}", lake,
                                      args.parallelism)
            marks_file = work / f"marks-{i}.json"
            load = os.getloadavg()[0]
            t0 = time.perf_counter()
            r = subprocess.run([sys.executable, __file__, "--child", str(config), str(marks_file)], cwd=REPO,
                               env=env, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            if r.returncode != 0 or "match" not in r.stdout:
                raise SystemExit(f"binlake snapshot failed ({r.returncode}):\n{r.stdout}\n{r.stderr[-2000:]}")
            run = json.loads(marks_file.read_text())
            run["marks"]["exited"] = wall  # the parent's clock starts just before the exec
            runs.append({**run, "wall_s": wall, "load": load})
            shutil.rmtree(lake, ignore_errors=True)
            print(f"  run {i + 1}: {wall:.2f} s, CPU {run['cpu_s']:.2f} s, load {load:.1f}", flush=True)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)

    steps = {name: statistics.median(r["marks"][end] - (r["marks"][start] if start else 0.0) for r in runs)
             for name, start, end in STEPS}
    print(f"\nbinlake snapshot of {args.rows:,} rows, whole process, median of {len(runs)} runs (s):")
    for name, seconds in steps.items():
        print(f"  {seconds:7.3f}  {name}")
    print(f"  {statistics.median(r['wall_s'] for r in runs):7.3f}  whole process "
          f"(CPU {statistics.median(r['cpu_s'] for r in runs):.2f} s)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rows": args.rows, "steps_s": steps, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
