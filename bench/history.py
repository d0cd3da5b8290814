"""Table modes benchmark: stream throughput of one backlog into tables in each layout
(cdc_core/schema/modes.py), alternating.

    .venv/bin/python bench/history.py [--rows N] [--repeat K] [--mix I/U/D] [--preload N]
                                      [--modes current,metadata,history,soft_delete] [--strict]

One run starts a throwaway MariaDB (devtools.local_mariadb) and writes one backlog, as
bench/stream.py does (its ``create_tables`` and ``generate_backlog``: transactions of 100-1000
rows on three 7-column tables, by default 80 % inserts, 15 % range updates, 5 % deletes; with
``--preload N`` t1 alone, whose ids 1..N exist before the backlog, in MySQL and in a base lake
streamed per mode beforehand, untimed). Then, K times, for each mode in turn (the order
rotating each round, so none always runs first or on a warmer cache): the stream engine
(``StreamEngine(cfg, until_now=True).run()`` in this process) reads the backlog into a fresh
lake (or a copy of the mode's base lake) whose tables are in that mode. The runs start once
the backlog's last change is over CATCHUP_LAG_SECONDS old, so every run reads it as the
backlog it is (catch-up batches, cdc_core/batch/micro_batch.py), the first one too:

- ``current``: the default (no option set);
- ``metadata``: ``sink.metadata_columns: [_cdc_ts, _cdc_position]``;
- ``history``: ``sink.table_modes: {.*: history}``;
- ``soft_delete``: ``sink.table_modes: {.*: soft_delete}``.

rows/s = the backlog's changes / wall seconds of the run; on a shared, loaded host the CPU
seconds of the run (this process and its reader process, getrusage) are reported too, and
the ratios by CPU (changes per CPU second), which other load changes far less. After each run the tables' rows
that MySQL holds (live rows, current versions: pipelines/lake/reads.py ``count_rows``) must
equal MySQL's counts, and a history table must hold one version per insert and update of
the backlog (plus the preloaded rows). Reported: each mode's median rows/s and its ratio to
``current``'s; targets: history ≥ 0.7×, metadata ≥ 0.95×. Figures go to
bench/out/history_throughput.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from deltalake import DeltaTable  # noqa: E402

from bench.stream import DB, MIX, Backlog, create_tables, generate_backlog, parse_mix, stream_config  # noqa: E402
from cdc_core.batch.micro_batch import CATCHUP_LAG_SECONDS  # noqa: E402
from cdc_core.config import parse_config  # noqa: E402
from cdc_core.offset.position import BinlogPosition  # noqa: E402
from devtools.local_mariadb import LocalMariaDB  # noqa: E402
from pipelines.lake.reads import count_rows  # noqa: E402
from pipelines.stream import StreamEngine  # noqa: E402

OUT = REPO / "bench" / "out" / "history_throughput.json"
SINK = {"current": {}, "metadata": {"metadata_columns": ["_cdc_ts", "_cdc_position"]},
        "history": {"table_modes": {".*": "history"}}, "soft_delete": {"table_modes": {".*": "soft_delete"}}}
TARGETS = {"history": 0.7, "metadata": 0.95}
SERVER_ID = 7100


def config(server: LocalMariaDB, lake: Path, name: str, mode: str, start: BinlogPosition, server_id: int,
           args: argparse.Namespace):
    raw = stream_config(server, lake, name, server_id, DB, start, args)
    raw["sink"].update(SINK[mode])
    return parse_config(raw)


def base_lakes(server: LocalMariaDB, start: BinlogPosition, modes: list[str], work: Path,
               args: argparse.Namespace) -> dict[str, tuple[Path, str]]:
    """Per mode, a lake holding the preload (streamed from ``start``), untimed."""
    out = {}
    for i, mode in enumerate(modes):
        lake, name = work / f"base-{mode}", f"bench_history_base_{mode}"
        StreamEngine(config(server, lake, name, mode, start, SERVER_ID - 1 - i, args), until_now=True).run()
        out[mode] = (lake, name)
    return out


def run(server: LocalMariaDB, backlog: Backlog, mode: str, work: Path, run_id: str, args: argparse.Namespace,
        base: tuple[Path, str] | None, history_versions: int) -> dict:
    lake, name = work / f"lake-{mode}-{run_id}", f"bench_history_{mode}_{run_id}"
    if base is not None:
        shutil.copytree(base[0], lake)
        name = base[1]
    cfg = config(server, lake, name, mode, backlog.start, SERVER_ID, args)
    cpu0 = cpu_seconds()
    t0 = time.perf_counter()
    summary = StreamEngine(cfg, until_now=True).run()
    seconds = time.perf_counter() - t0
    cpu = cpu_seconds() - cpu0
    counts = {t: count_rows(DeltaTable(str(lake / DB / t))) for t in backlog.tables}
    if counts != backlog.mysql_rows:
        raise AssertionError(f"{mode}: Delta's rows {counts} != MySQL's {backlog.mysql_rows}")
    if summary.changes != backlog.changes:
        raise AssertionError(f"{mode}: read {summary.changes} changes, the backlog has {backlog.changes}")
    versions = sum(DeltaTable(str(lake / DB / t)).to_pyarrow_dataset().count_rows() for t in backlog.tables)
    if mode == "history" and versions != history_versions:
        raise AssertionError(f"history: {versions} versions, the backlog opens {history_versions}")
    files = sum(len(DeltaTable(str(lake / DB / t)).file_uris()) for t in backlog.tables)
    shutil.rmtree(lake, ignore_errors=True)
    return {"seconds": seconds, "rows_per_s": backlog.changes / seconds, "cpu_seconds": cpu,
            "rows_per_cpu_s": backlog.changes / cpu, "batches": summary.batches, "delta_rows": versions,
            "delta_files": files}


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its reaped children (the reader process)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=300_000, help="row changes in the backlog")
    ap.add_argument("--repeat", type=int, default=3, help="rounds, each mode once per round")
    ap.add_argument("--mix", type=parse_mix, default=MIX, metavar="I/U/D")
    ap.add_argument("--preload", type=int, default=0, metavar="N", help="t1 holds ids 1..N before the backlog")
    ap.add_argument("--modes", default="current,metadata,history,soft_delete")
    ap.add_argument("--max-batch-rows", type=int)
    ap.add_argument("--max-batch-seconds", type=float)
    ap.add_argument("--catchup-batch-rows", type=int, help="stream.catchup_batch_rows (bench/stream.py)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    modes = args.modes.split(",")
    if "current" not in modes:
        ap.error("--modes must include current (the ratios' base)")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    env = {"nproc": os.cpu_count(), "loadavg_start": [round(x, 2) for x in os.getloadavg()],
           "started_at": dt.datetime.now(dt.UTC).isoformat()}
    work = Path(tempfile.mkdtemp(prefix="binlake-history-bench-"))
    server = LocalMariaDB(server_id=1)
    try:
        server.start()
        start = create_tables(server, args.preload)
        bases = base_lakes(server, start, modes, work, args) if args.preload else {}
        backlog = generate_backlog(server, args.rows, args.mix, preload=args.preload)
        time.sleep(CATCHUP_LAG_SECONDS + 1)  # binlog timestamps are whole seconds
        # A history table holds the preloaded rows, then one version per insert and update.
        versions = args.preload + backlog.inserts + backlog.updates
        print(f"backlog: {backlog.changes:,} changes ({backlog.inserts:,} inserts, {backlog.updates:,} updates, "
              f"{backlog.deletes:,} deletes) in {backlog.transactions:,} transactions", flush=True)
        runs: dict[str, list[dict]] = {m: [] for m in modes}
        for r in range(args.repeat):
            order = modes[r % len(modes):] + modes[:r % len(modes)]
            for mode in order:
                out = run(server, backlog, mode, work, f"{r}", args, bases.get(mode), versions)
                runs[mode].append(out)
                print(f"round {r + 1} {mode:>12}: {out['rows_per_s']:>9,.0f} rows/s ({out['seconds']:.1f} s), "
                      f"{out['rows_per_cpu_s']:>9,.0f} rows/CPU s ({out['cpu_seconds']:.1f} s), "
                      f"{out['batches']} batches, {out['delta_files']} files", flush=True)
        medians = {m: statistics.median(x["rows_per_s"] for x in runs[m]) for m in modes}
        cpu = {m: statistics.median(x["rows_per_cpu_s"] for x in runs[m]) for m in modes}
        print()
        print(f"{'mode':>12} {'rows/s':>10} {'× current':>10} {'rows/CPU s':>11} {'× current':>10}  target")
        verdicts = {}
        for m in modes:
            ratio, cpu_ratio = medians[m] / medians["current"], cpu[m] / cpu["current"]
            target = TARGETS.get(m)
            verdicts[m] = None if target is None else ratio >= target
            mark = "" if target is None else f"≥ {target} {'PASS' if verdicts[m] else 'MISS'} (wall)"
            print(f"{m:>12} {medians[m]:>10,.0f} {ratio:>10.2f} {cpu[m]:>11,.0f} {cpu_ratio:>10.2f}  {mark}")
        env["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "env": env,
                                        "backlog": backlog.to_dict(), "runs": runs, "median_rows_per_s": medians,
                                        "ratio_to_current": {m: medians[m] / medians["current"] for m in modes},
                                        "median_rows_per_cpu_s": cpu,
                                        "cpu_ratio_to_current": {m: cpu[m] / cpu["current"] for m in modes},
                                        "targets": TARGETS}, indent=2) + "\n")
        return 1 if args.strict and any(v is False for v in verdicts.values()) else 0
    finally:
        server.cleanup()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
