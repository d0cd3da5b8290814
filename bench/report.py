"""The benchmarks' figures in one table (``make bench``): every figure a benchmark in bench/
measures against its baseline, the ratio, the goal and PASS/MISS (bench/README.md describes
each benchmark and keeps the latest figures).

    .venv/bin/python bench/report.py                 # run every benchmark, then the table
    .venv/bin/python bench/report.py --only stream_updates --only latency
    .venv/bin/python bench/report.py --report        # the table from the last runs' JSON only

Each benchmark runs as its own process with the sizes below and writes its JSON under
bench/out/report/; the table is read back from those files, so ``--report`` prints the
last figures without running anything (a figure never run shows as "not run"). Each row
carries the load average at the end of its run: on 2 shared cores the ratios move with it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out" / "report"


@dataclass(frozen=True)
class Figure:
    """One row of the table: what is measured, against what, and the goal."""

    name: str  # the benchmark run it comes from (--only)
    what: str
    baseline: str
    goal: str
    read: Callable[[dict], tuple[str, str, float | None, bool]] | None  # JSON -> measured, baseline, ratio, pass


@dataclass(frozen=True)
class Run:
    """A benchmark process and the JSON file it leaves (under OUT)."""

    script: str
    args: tuple[str, ...]
    json: str
    repeats: bool = True  # takes --repeat as alternating repeats of what it compares

    def command(self, repeat: int) -> list[str]:
        path = OUT / self.json
        # stream.py writes one file per measurement into a folder; the others write one file
        where = ("--out-dir", str(path.parent)) if self.script == "stream.py" else ("--out", str(path))
        return [sys.executable, str(REPO / "bench" / self.script), *self.args,
                *(("--repeat", str(repeat)) if self.repeats else ()), *where]


RUNS = {
    "snapshot": Run("snapshot.py", ("--rows", "2000000", "--whole-process"), "snapshot.json"),
    # one round: loading and reading 20M rows four ways takes many minutes; (b) as Spark's own Parquet
    # write only (toArrow collects the whole table into the driver: out of heap at 20M rows)
    "snapshot_20m": Run("snapshot.py", ("--rows", "20000000", "--whole-process", "--b-method", "parquet"),
                        "snapshot_20m.json", repeats=False),
    "noop_snapshot": Run("noop_snapshot.py", ("--rows", "2000000"), "noop_snapshot.json", repeats=False),
    "stream_inserts": Run("stream.py", ("--only", "throughput", "--rows", "600000", "--mix", "100/0/0"),
                          "stream_inserts/stream_throughput.json"),
    "stream_updates": Run("stream.py", ("--only", "throughput", "--preload", "1000000", "--rows", "300000",
                                        "--mix", "0/100/0"), "stream_updates/stream_throughput.json"),
    "catchup": Run("catchup.py", ("--rows", "1000000", "--workers", "1,2,3"), "catchup.json"),
    # the same backlog into tables of each mode, alternating (docs/history.md)
    "history": Run("history.py", ("--rows", "300000"), "history.json"),
    # 500 tables of 100 rows: the snapshot, a batch touching every table, the Dagster definitions
    "many_tables": Run("many_tables.py", ("--tables", "500"), "many_tables.json", repeats=False),
    # 20,000 rows/s: 200 rows per transaction at 100 transactions/s; one paced load
    "latency": Run("stream.py", ("--only", "latency", "--latency-seconds", "60", "--rows-per-tx", "200"),
                   "stream_latency/stream_latency.json", repeats=False),
}


def _snapshot(doc: dict) -> tuple[str, str, float | None, bool]:
    r, b = doc["results"], doc["results"][doc["b_method"]]
    ratio = doc["ratios"]["(a)/(b)"]
    return f"{r['a']['median_s']:.2f} s", f"{b['median_s']:.2f} s", ratio["median"], ratio["pass"]


def _whole_process(ratio: str, mine: str, other: str) -> Callable[[dict], tuple[str, str, float | None, bool]]:
    """Reads the whole-process ratio ``ratio`` ((A) ``mine`` against ``other``) of snapshot.py --whole-process."""
    def read(doc: dict) -> tuple[str, str, float | None, bool]:
        r, q = doc["results"], doc["ratios"][ratio]
        return f"{r[mine]['median_s']:.2f} s", f"{r[other]['median_s']:.2f} s", q["median"], q["pass"]
    return read


def _large(doc: dict) -> tuple[str, str, float | None, bool]:
    measured, baseline, ratio, ok = _whole_process("(A)/(D)", "w_binlake", "w_dlt")(doc)
    a = doc["results"]["a"]["runs"][0]  # the in-session run: SnapshotSummary's peaks
    whole = max(r.get("peak_rss_mb") or 0.0 for r in doc["results"]["w_binlake"]["runs"])
    rss = (f"; peak RSS driver {a['driver_peak_rss_mb']:.0f} MB, task {a['task_peak_rss_mb']:.0f} MB, "
           f"`binlake snapshot` process {whole:.0f} MB")
    return measured + rss, baseline, ratio, ok


def _noop(doc: dict) -> tuple[str, str, float | None, bool]:
    return (f"{doc['rerun_median_s']:.2f} s", f"{doc['first_s']:.2f} s (first run)",
            doc["rerun_median_s"] / doc["first_s"], doc["pass"])


def _stream(doc: dict) -> tuple[str, str, float | None, bool]:
    r, ratio = doc["results"], doc["ratio_b_over_a"]
    return (f"{r['b']['rows_per_s_median']:,.0f} rows/s ({doc['backlog']['changes']:,} changes)",
            f"{r['a']['rows_per_s_median']:,.0f} rows/s",
            ratio["median"], ratio["median"] >= STREAM_GOAL)


def _latency(doc: dict) -> tuple[str, str, float | None, bool]:
    d = doc["latency_s"]
    ok = d["p50"] <= LATENCY_P50_S and d["p99"] <= LATENCY_P99_S and not doc["missing"]
    return (f"p50 {d['p50']:.2f} s, p99 {d['p99']:.2f} s at {doc['achieved_rows_per_s']:,.0f} rows/s",
            "-", None, ok)


def _catchup(doc: dict) -> tuple[str, str, float | None, bool]:
    best = doc["workers"][str(doc["best_workers"])]
    each = ", ".join(f"{w}: {r['ratio']:.2f}x" for w, r in doc["workers"].items())
    return (f"{best['rows_per_s']:,.0f} rows/s with {doc['best_workers']} workers (workers {each})",
            f"{doc['raw']['rows_per_s']:,.0f} rows/s", best["ratio"], doc["pass"])


def _mode(mode: str, goal: float) -> Callable[[dict], tuple[str, str, float | None, bool]]:
    """bench/history.py: ``mode``'s median rows/s against the default mode's."""
    def read(doc: dict) -> tuple[str, str, float | None, bool]:
        m, ratio = doc["median_rows_per_s"], doc["ratio_to_current"][mode]
        cpu = doc["cpu_ratio_to_current"][mode]
        return (f"{m[mode]:,.0f} rows/s (by CPU seconds {cpu:.2f}x)", f"{m['current']:,.0f} rows/s", ratio,
                ratio >= goal)
    return read


def _many_snapshot(doc: dict) -> tuple[str, str, float | None, bool]:
    r = doc["snapshot"]
    return (f"{r['per_table_ms']:.1f} ms per table ({doc['tables']} tables {r['many']['seconds']:.2f} s)",
            f"one table of the same rows {r['one']['seconds']:.2f} s", None, r["pass"])


def _many_stream(doc: dict) -> tuple[str, str, float | None, bool]:
    r = doc["stream"]
    return (f"batch committed in {r['many']['slowest_batch_commit_s']:.2f} s, lag {r['many']['lag_s']:.2f} s "
            f"({doc['tables']} tables, {r['many']['batches']} batches)",
            f"one table: {r['one']['slowest_batch_commit_s']:.2f} s, lag {r['one']['lag_s']:.2f} s", None, r["pass"])


def _many_defs(doc: dict) -> tuple[str, str, float | None, bool]:
    r = doc["defs"]
    return (f"{r['many']['seconds']:.2f} s, {r['many']['peak_rss_mb']:.0f} MB ({r['many']['tables']} tables; "
            f"{r['per_table_ms']:.1f} ms per table; 2,000 tables projected {r['projected_2000_s']:.1f} s)",
            f"{r['few']['tables']} tables {r['few']['seconds']:.2f} s, {r['few']['peak_rss_mb']:.0f} MB", None,
            r["pass"])


STREAM_GOAL = 0.9
LATENCY_P50_S, LATENCY_P99_S = 0.5, 1.5

FIGURES = (
    Figure("snapshot", "1. snapshot 2M rows, binlake (in session) vs Spark JDBC", "Spark JDBC", ">= 2x", _snapshot),
    Figure("snapshot", "1. snapshot 2M rows, `binlake snapshot` vs a Spark JDBC job, whole process",
           "Spark JDBC", ">= 2x", _whole_process("(A)/(B)", "w_binlake", "w_jdbc")),
    Figure("snapshot", "1. snapshot 2M rows, whole process vs dlt (connectorx, partitioned)", "dlt", ">= 1x",
           _whole_process("(A)/(D)", "w_binlake", "w_dlt")),
    Figure("snapshot_20m", "1. snapshot 20M rows vs dlt, whole process; peak RSS", "dlt", ">= 1.5x", _large),
    Figure("noop_snapshot", "1. no-op `binlake snapshot` re-run, whole process", "first run", "< 3 s", _noop),
    Figure("stream_inserts", "2. stream inserts, whole engine vs raw decode loop", "raw loop", ">= 0.9x",
           _stream),
    Figure("stream_updates", "2. stream updates over a 1M-row table vs raw loop", "raw loop", ">= 0.9x",
           _stream),
    Figure("catchup", "3. 1M-change catch-up, parallel decode vs raw single reader", "raw loop", ">= 1.25x",
           _catchup),
    Figure("history", "2. stream into history tables vs the default mode", "current mode", ">= 0.7x",
           _mode("history", 0.7)),
    Figure("history", "2. stream with metadata columns vs the default mode", "current mode", ">= 0.95x",
           _mode("metadata", 0.95)),
    Figure("many_tables", "3. snapshot of 500 tables of 100 rows, whole process: cost per table",
           "one table, same rows", "<= 10 ms", _many_snapshot),
    Figure("many_tables", "3. a batch touching 500 tables: its table commits; last COMMIT to checkpoint",
           "one table", "<= 1 s", _many_stream),
    Figure("many_tables", "3. Dagster definitions of 500 tables loaded, whole process",
           "7 tables", "2,000 tables <= 10 s, <= 500 MB", _many_defs),
    Figure("latency", "4. latency at 20,000 rows/s inserts", "-", "p50 <= 0.5 s, p99 <= 1.5 s", _latency),
)


def _load(doc: dict) -> str:
    env = doc.get("env", {})
    load = env.get("loadavg_end") or env.get("loadavg_start") or doc.get("loadavg_end")
    return f"{load[0]:.1f}" if load else "-"


def table() -> list[list[str]]:
    rows = [["figure", "measured", "baseline", "ratio", "goal", "result", "load"]]
    for f in FIGURES:
        if f.read is None:
            rows.append([f.what, "-", f.baseline, "-", f.goal, "not measured (no bench)", "-"])
            continue
        path = OUT / RUNS[f.name].json
        if not path.exists():
            rows.append([f.what, "-", f.baseline, "-", f.goal, "not run", "-"])
            continue
        doc = json.loads(path.read_text())
        try:
            measured, baseline, ratio, ok = f.read(doc)
        except KeyError:  # an older run of the benchmark, without this figure
            rows.append([f.what, "-", f.baseline, "-", f.goal, "not run", "-"])
            continue
        rows.append([f.what, measured, baseline, "-" if ratio is None else f"{ratio:.2f}", f.goal,
                     "PASS" if ok else "MISS", _load(doc)])
    return rows


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, r in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=tuple(RUNS), action="append", help="run only this benchmark (repeatable)")
    ap.add_argument("--repeat", type=int, default=2, help="alternating repeats of each benchmark (medians)")
    ap.add_argument("--report", action="store_true", help="print the table from the last runs, run nothing")
    args = ap.parse_args(argv)
    failed = []
    if not args.report:
        OUT.mkdir(parents=True, exist_ok=True)
        for name in args.only or tuple(RUNS):
            command = RUNS[name].command(args.repeat)
            print(f"== {name}: {' '.join(command[1:])}", flush=True)
            # the benchmarks import the repository's packages: this checkout's, not an installed copy
            path = os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))
            if subprocess.run(command, cwd=REPO, env={**os.environ, "PYTHONPATH": path}).returncode:
                failed.append(name)
    print()
    print("binlake's benchmark figures, baselines, goals (ratios are medians of one run's alternating repeats)")
    print_table(table())
    if failed:
        print(f"\nbenchmarks that failed (their rows show an older run or none): {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
