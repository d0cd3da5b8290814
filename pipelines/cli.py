"""The ``binlake`` command line. Exit codes: 0 success, 2 bad input (config,
prerequisites, another process writing the pipeline), 1 runtime failure.

The writing commands (``snapshot``, ``stream``, ``run``) hold the pipeline's writer lock
(pipelines/lake/writer_lock.py) for their whole life, taken before anything else is done; the
read-only ones (``validate``, ``status``, ``reconcile``) never take it (tests/test_writer_lock.py).
``reconcile`` exits 0 when every chunk is equal, 1 when chunks still differ after their
re-checks, 2 on bad input (an unknown ``--table``); with ``--repair`` it requests a backfill of
each chunk that differs (exit 0 once they are done).
``backfill`` stores its request, then takes the lock and streams until the request is done;
when another process holds the lock (a running stream) it hands the request to it and waits.
``resync`` (a writing command) is the way out when the stream's binlog position was purged
(pipelines/resync.py). ``maintain`` compacts and vacuums the tables now: under the writer lock
when no stream runs, else handed to the running stream and waited for
(pipelines/lake/maintenance/).

Output: tables fit a terminal; on anything else (a pipe, a file, cron, CI, a Dagster run's
stdout) they are printed at their full width, so no number is cut. ``snapshot``, ``stream``,
``status`` and ``reconcile`` take ``--json``: their summary as one JSON object on stdout
(progress goes to stderr) (tests/test_cli.py).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cdc_core.config import BinlakeConfig, ConfigError, load_config
from cdc_core.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_RUNTIME, BinlakeError
from pipelines.arenas import limit_arenas
from pipelines.text_table import render

err = Console(stderr=True)
out = Console()
_secrets: set[str] = set()  # values to mask in any message (the source password, once loaded)


def _redact(text: str) -> str:
    for secret in _secrets:
        text = text.replace(secret, "***")
    return text


def _line(prefix: str, text: str) -> None:
    """One problem, one line on stderr: never wrapped, markup in ``text`` not interpreted, secrets masked."""
    err.print(prefix, escape(_redact(text)), soft_wrap=True, highlight=False)


def _print_table(t: Table) -> None:
    """A table on stdout: fitted to a terminal; elsewhere at its full width (a log keeps every
    digit, where a pipe's 80 columns would cut numbers short)."""
    if out.is_terminal:
        out.print(t)
        return
    text = render(t)  # drawn directly: rich's layout of a snapshot of 2,000 tables takes over a second
    if text is not None:
        out.file.write(text)
        return
    # Console.print caps a width at the console's own: on a console wide enough, a table takes
    # its own (measuring it first as well renders a snapshot of 500 tables' table twice as slowly).
    Console(file=out.file, width=1_000_000).print(t)


def _print_json(data: dict) -> None:
    import json

    out.print_json(json.dumps(data, default=str))


def _load(path: str) -> BinlakeConfig:
    try:
        cfg = load_config(path)
    except ConfigError as e:
        _line("[red]config error[/red]:", str(e))
        raise SystemExit(EXIT_BAD_INPUT) from None
    if len(cfg.source.password.get_secret_value()) >= 4:  # masking a 1-3 character string would garble messages
        _secrets.add(cfg.source.password.get_secret_value())
    _secrets.update(cfg.sink.secret_values())
    return cfg


def _problems(cfg: BinlakeConfig) -> list[str]:
    """Run the prerequisite checks and print each problem on its own line (stderr), each warning
    too (stdout: a warning does not fail the check)."""
    from cdc_core.source.validate import findings
    from pipelines.lake.storage import commit_problem

    found = findings(cfg)
    for w in found.warnings:
        out.print("[yellow]![/yellow]", escape(_redact(w)), soft_wrap=True, highlight=False)
    problems = found.problems
    sink = commit_problem(cfg.sink.path, cfg.sink.storage_options)  # object stores: conditional writes honoured
    problems += [sink] if sink else []
    for p in problems:
        _line("[red]✗[/red]", p)
    return problems


@contextlib.contextmanager
def _sole_writer(cfg: BinlakeConfig, args, *, refuse: bool = True):
    """Hold the pipeline's writer lock while the block runs; refuse at once (exit 2, one line naming
    the holder) when another process holds it, or, with ``refuse=False``, yield None then."""
    from pipelines.lake.storage import require_safe_commits
    from pipelines.lake.writer_lock import WriterLockError, writer_lock

    require_safe_commits(cfg.sink.path, cfg.sink.storage_options)  # a missing bucket: one line, before the lock
    lock = writer_lock(cfg.sink.path, cfg.pipeline.name, f"binlake {args.command} -c {args.config}",
                       cfg.sink.storage_options)
    try:
        lock.acquire()
    except WriterLockError as e:
        if not refuse:
            yield None
            return
        _line("[red]✗[/red]", str(e))
        raise SystemExit(EXIT_BAD_INPUT) from None
    try:
        yield lock
    finally:
        lock.release()


def cmd_validate(args) -> int:
    cfg = _load(args.config)
    if _problems(cfg):
        return EXIT_BAD_INPUT
    out.print(f"✓ {args.config}: source {cfg.source.host}:{cfg.source.port} is ready for binlake")
    return EXIT_OK


def _run_snapshot(cfg: BinlakeConfig, as_json: bool = False) -> int:
    from cdc_core.retry import RetryBudgetExceeded
    from pipelines.snapshot.driver import SnapshotJob
    from pipelines.snapshot.verify import finished_snapshot

    summary = finished_snapshot(cfg)
    if summary is not None:  # nothing to read: no Spark session (its start alone takes seconds)
        _snapshot_report(cfg, summary, as_json)
        return EXIT_OK
    job = SnapshotJob(cfg)  # starts Spark only where groups run on it (source.snapshot.runner)
    with Progress(TextColumn("snapshot"), BarColumn(), MofNCompleteColumn(), TextColumn("chunks"),
                  TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), console=err) as progress:
        bar = progress.add_task("chunks", total=None, rate="")
        started = time.monotonic()

        def update(done: int, total: int, rows: int) -> None:
            elapsed = max(time.monotonic() - started, 1e-6)
            progress.update(bar, completed=done, total=total, rate=f"{rows:,} rows, {rows / elapsed:,.0f} rows/s")

        try:
            job.progress = update
            summary = job.run()
        except RetryBudgetExceeded as e:
            _line("[red]error[/red]:", f"{e}; committed chunks are kept: run the snapshot again to resume")
            return EXIT_RUNTIME
    _snapshot_report(cfg, summary, as_json)
    return EXIT_OK


def cmd_snapshot(args) -> int:
    cfg = _load(args.config)
    with _sole_writer(cfg, args):
        if _problems(cfg):
            return EXIT_BAD_INPUT
        return _run_snapshot(cfg, args.json)


def _snapshot_report(cfg: BinlakeConfig, summary, as_json: bool) -> None:
    if as_json:
        _print_json(summary.to_json(cfg.pipeline.name))
        return
    t = Table(title=f"snapshot of {cfg.pipeline.name} ({summary.seconds:.1f}s)")
    t.add_column("table", no_wrap=True, min_width=max((len(s.table) for s in summary.tables), default=5))
    for col in ("chunks", "read now", "rows read", "Delta rows", "MySQL rows", "check"):
        t.add_column(col, justify="right")
    for s in summary.tables:
        check = "[green]match[/green]" if s.matches else "[yellow]differs[/yellow]"
        t.add_row(s.table, "streamed" if s.streamed else str(s.chunks), str(s.chunks_read), f"{s.rows_written:,}",
                  f"{s.delta_rows:,}", f"{s.mysql_rows:,}", check)
    _print_table(t)
    if any(not s.matches for s in summary.tables):
        out.print("Row counts differ where the source changed during the snapshot; the stream catches up from "
                  "the chunks' watermarks.")


def _stream(cfg: BinlakeConfig, *, until_now: bool = False, max_seconds: float | None = None,
            as_json: bool = False) -> int:
    from pipelines.stream import StreamEngine

    started = time.monotonic()

    def update(summary, offset) -> None:
        elapsed = max(time.monotonic() - started, 1e-6)
        status.update(f"streaming {cfg.pipeline.name}: {summary.changes:,} changes "
                      f"({summary.changes / elapsed:,.0f}/s), {summary.batches} batches, at {offset.applied}")

    engine = StreamEngine(cfg, until_now=until_now, max_seconds=max_seconds, progress=update)
    with err.status(f"starting the stream of {cfg.pipeline.name}") as status:
        summary = engine.run()
    if as_json:
        _print_json(summary.to_json(cfg.pipeline.name))
        return EXIT_OK
    out.print(f"stream of {cfg.pipeline.name}: {summary.changes:,} changes in {summary.batches} batches "
              f"({summary.commits} table commits, {summary.reconnects} reconnects) from {summary.start} to "
              f"{summary.end} in {summary.seconds:.1f}s; stopped: {summary.stop_reason}", soft_wrap=True)
    return EXIT_OK


def cmd_stream(args) -> int:
    limit_arenas()  # before pyarrow's import starts threads (pipelines/arenas.py)
    cfg = _load(args.config)
    with _sole_writer(cfg, args):
        if _problems(cfg):
            return EXIT_BAD_INPUT
        return _stream(cfg, until_now=args.until == "now", max_seconds=args.max_seconds, as_json=args.json)


def cmd_run(args) -> int:
    cfg = _load(args.config)
    with _sole_writer(cfg, args):
        if _problems(cfg):
            return EXIT_BAD_INPUT
        if cfg.source.startup.mode in ("initial", "snapshot"):
            code = _run_snapshot(cfg)
            if code != EXIT_OK:
                return code
        return _stream(cfg)


def cmd_backfill(args) -> int:
    from cdc_core.chunks.incremental import BackfillState
    from pipelines.backfill.requests import change_state, request_backfill

    cfg = _load(args.config)
    if args.list:
        _backfill_list(cfg)
        return EXIT_OK
    for request_id, state in ((args.cancel, BackfillState.CANCELLED), (args.pause, BackfillState.PAUSED),
                              (args.resume, BackfillState.PENDING)):
        if request_id:
            req = change_state(cfg, request_id, state)
            out.print(f"backfill {req.id} of {req.table}: {req.state}", highlight=False)
            return EXIT_OK
    if not args.table:
        _line("[red]✗[/red]", "name a table (--table db.table), or use --list, --cancel, --pause or --resume")
        return EXIT_BAD_INPUT
    req = request_backfill(cfg, args.table, args.lo, args.hi)
    out.print(f"backfill {req.id} of {req.table} ({req.describe_range()}) requested", highlight=False)
    if args.no_wait:
        out.print("the stream works on it (a running one within seconds, else the next `binlake stream`)")
        return EXIT_OK
    req, = _carry_out(cfg, args, [req.id])
    out.print(f"backfill {req.id} of {req.table}: {req.progress()}{': ' + req.detail if req.detail else ''}",
              soft_wrap=True, highlight=False)
    return EXIT_OK if req.state == BackfillState.DONE else EXIT_RUNTIME


def cmd_resync(args) -> int:
    from cdc_core.chunks.incremental import BackfillState
    from pipelines.backfill.requests import current
    from pipelines.resync import resync

    cfg = _load(args.config)
    with _sole_writer(cfg, args):
        if _problems(cfg):
            return EXIT_BAD_INPUT
        offset, requests = resync(cfg)
        out.print(f"resync of {cfg.pipeline.name}: the stream restarts at {offset.applied}; "
                  f"{len(requests)} tables to backfill online", soft_wrap=True, highlight=False)
        if args.no_wait:
            out.print("the next `binlake stream` backfills them")
            return EXIT_OK
        _stream(cfg, until_now=True)
    reqs = current(cfg, [r.id for r in requests])
    for r in reqs:
        out.print(f"backfill {r.id} of {r.table}: {r.progress()}", soft_wrap=True, highlight=False)
    return EXIT_OK if all(r.state == BackfillState.DONE for r in reqs) else EXIT_RUNTIME


def _carry_out(cfg: BinlakeConfig, args, request_ids: list[str]) -> list:
    """Backfill requests done: by this process (it takes the writer lock and streams until they
    and the binlog up to now are done) when no other writes the pipeline, else by the running
    stream, waited for. Their final states (one paused: as it is)."""
    from cdc_core.chunks.incremental import BackfillState
    from pipelines.backfill.requests import current, wait_for

    while True:
        with _sole_writer(cfg, args, refuse=False) as lock:
            if lock is not None:
                if _problems(cfg):
                    raise SystemExit(EXIT_BAD_INPUT)
                _stream(cfg, until_now=True)
                return current(cfg, request_ids)
        # Another process writes the pipeline: a running stream does the work; if it stops first
        # (a bounded run), the next round takes the lock and finishes it here.
        with err.status("waiting for the running stream to backfill") as status:
            reqs = wait_for(cfg, request_ids, lambda rs: status.update(
                "; ".join(f"backfill {r.id} of {r.table}: {r.progress()}" for r in rs)), seconds=10)
        if all(r.state.terminal for r in reqs) or any(r.state == BackfillState.PAUSED for r in reqs):
            return reqs


def _backfill_list(cfg: BinlakeConfig) -> None:
    from pipelines.lake.control_store import ControlStore

    t = Table(title=f"backfills of {cfg.pipeline.name}")
    for col in ("id", "table", "range", "reason", "state", "updated"):
        t.add_column(col, no_wrap=True)
    for r in ControlStore.of(cfg).backfills():
        t.add_row(r.id, r.table, escape(r.describe_range()), r.reason, escape(r.progress()),
                  r.updated_at.strftime("%Y-%m-%d %H:%M:%S") if r.updated_at else "-")
    _print_table(t)


def cmd_maintain(args) -> int:
    from pipelines.lake.maintenance.maintainer import maintain

    cfg = _load(args.config)
    with err.status(f"maintaining {args.table or 'every table'} of {cfg.pipeline.name} (handed to the running "
                    "stream if one runs)"):
        report = maintain(cfg, args.table, f"binlake maintain -c {args.config}")
    _maintenance_report(report)
    return EXIT_OK


def _maintenance_report(report) -> None:
    t = Table(title=f"maintenance ({report.by})")
    for col in ("table", "files before", "files after", "files deleted", "bytes deleted"):
        t.add_column(col, justify="left" if col == "table" else "right", no_wrap=col == "table")
    for r in report.tables:
        t.add_row(escape(r.table), str(r.files_before), str(r.files_after), str(r.files_deleted),
                  f"{r.bytes_deleted:,}")
    out.print(t)
    for r in report.tables:
        for line in (r.compaction, r.vacuum, r.note):
            if line:
                out.print(escape(line), soft_wrap=True, highlight=False)


def cmd_status(args) -> int:

    from pipelines.lake.writer_lock import writer_lock
    from pipelines.status import pipeline_status

    cfg = _load(args.config)
    st = pipeline_status(cfg)
    # Looked at, never taken: status works while a writer runs.
    holder = writer_lock(cfg.sink.path, cfg.pipeline.name, "binlake status", cfg.sink.storage_options).holder()
    st["writer"] = None if holder is None else {"host": holder.host, "pid": holder.pid, "command": holder.command,
                                               "since": holder.since.isoformat(),
                                               "expires": holder.expires.isoformat() if holder.expires else None}
    if args.json:
        _print_json(st)
        return EXIT_OK
    out.print(f"pipeline {cfg.pipeline.name}: stream {st['stream']['state']}, committed at "
              f"{st['stream']['committed_position'] or '-'}, lag {_lag(st['stream'])}", soft_wrap=True)
    out.print(f"writer: {escape(holder.describe()) if holder else 'none'}", soft_wrap=True, highlight=False)
    if st["source_error"]:
        _line("[yellow]![/yellow]", f"source not reachable: {st['source_error']}")
    t = Table()
    for col in ("table", "phase", "rows", "committed position", "lag"):
        t.add_column(col, justify="right" if col == "rows" else "left", no_wrap=True)
    for r in st["tables"]:
        shown = r["table"] if r["sink"] == r["table"] else f"{r['table']} → {r['sink']}"  # routed: where it goes
        t.add_row(shown, r["phase"], f"{r['rows']:,}", r["committed_position"] or "-", _lag(r))
    _print_table(t)
    _upkeep_table(st["tables"])
    return EXIT_OK


def _upkeep_table(tables: list[dict]) -> None:
    """``binlake status``'s second table: each Delta table's files, bytes and last maintenance."""
    t = Table(title="Delta tables")
    for col in ("table", "files", "live bytes", "awaiting vacuum", "last compaction", "last vacuum"):
        t.add_column(col, justify="left" if col in ("table", "last compaction", "last vacuum") else "right",
                     no_wrap=True)
    shown: dict[str, dict] = {r["sink"]: r["maintenance"] for r in tables if r["maintenance"]}  # a route's sink once
    for sink, m in shown.items():
        t.add_row(escape(sink), f"{m['live_files']:,}", f"{m['live_bytes']:,}", f"{m['bytes_awaiting_vacuum']:,}",
                  _ran(m["last_compaction"]), _ran(m["last_vacuum"]))
    out.print(t)
    for sink, m in shown.items():
        for kind in ("last_compaction", "last_vacuum"):
            if m[kind]:
                out.print(f"{escape(sink)}: {kind.replace('_', ' ')} ({m[kind]['reason']}): {escape(m[kind]['did'])}",
                          soft_wrap=True, highlight=False)


def cmd_reconcile(args) -> int:

    from pipelines.reconcile.checksums import reconcile_tables

    cfg = _load(args.config)
    # Read-only: no writer lock (it would stop the stream); the only write is _binlake/reconcile_runs.
    with Progress(TextColumn("reconcile {task.fields[table]}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("chunks"), TimeElapsedColumn(), console=err, transient=True) as progress:
        bars: dict[str, object] = {}

        def update(table: str, done: int, total: int) -> None:
            if table not in bars:
                bars[table] = progress.add_task("chunks", total=total, table=table)
            progress.update(bars[table], completed=done, total=total)

        report = reconcile_tables(cfg, args.table or None, rechecks=args.rechecks, recheck_wait=args.recheck_wait,
                                  progress=update)
    if args.json:
        _print_json(report.to_json())
        return EXIT_OK if report.equal else EXIT_RUNTIME
    t = Table(title=f"reconcile of {cfg.pipeline.name} ({report.seconds:.1f}s)")
    for col in ("table", "chunks", "differing", "MySQL rows", "Delta rows", "result"):
        t.add_column(col, justify="left" if col in ("table", "result") else "right", no_wrap=col == "table")
    for r in report.tables:
        t.add_row(r.table, str(r.chunks_checked), str(len(r.mismatches)), f"{r.mysql_rows:,}", f"{r.delta_rows:,}",
                  "[green]equal[/green]" if r.equal else "[red]differs[/red]")
    _print_table(t)
    for r in report.tables:
        if r.excluded:
            out.print(f"{escape(r.table)}: not in the checksum (counted only): " + "; ".join(
                f"{escape(c)} ({escape(why)})" for c, why in r.excluded.items()), soft_wrap=True, highlight=False)
        for m in r.mismatches:
            where = "whole table" if m.key is None else f"{m.key} in [{m.lo!r}, {m.hi!r})"
            out.print(f"{escape(r.table)}: chunk {m.index} differs ({escape(where)}): MySQL {m.mysql_rows:,} rows, "
                      f"Delta {m.delta_rows:,}", soft_wrap=True, highlight=False)
        if r.mismatches:
            out.print(f"{escape(r.table)}: checked {r.rechecks} more times; server at {r.server_position}, stream "
                      f"committed at {r.stream_position or '-'}", soft_wrap=True, highlight=False)
    if report.equal or not args.repair:
        return EXIT_OK if report.equal else EXIT_RUNTIME
    return _repair(cfg, args, report)


def _repair(cfg: BinlakeConfig, args, report) -> int:
    """``reconcile --repair``: a backfill of each differing chunk, carried out (or handed to the
    running stream) and waited for; exit 0 once every one is done."""
    from cdc_core.chunks.incremental import BackfillState
    from pipelines.backfill.requests import request_repairs

    reqs, refused = request_repairs(cfg, report)
    for table, why in refused.items():
        _line("[red]✗[/red]", f"{table} cannot be repaired by a backfill: {why}")
    for table in dict.fromkeys(q.table for q in reqs):
        out.print(f"{escape(table)}: backfill of {sum(q.table == table for q in reqs)} differing chunks requested",
                  highlight=False)
    ids = [q.id for q in reqs]
    done = _carry_out(cfg, args, ids) if ids else []
    for q in done:
        out.print(f"backfill {q.id} of {q.table} ({escape(q.describe_range())}): {q.progress()}", soft_wrap=True,
                  highlight=False)
    return EXIT_OK if not refused and all(q.state == BackfillState.DONE for q in done) else EXIT_RUNTIME


def _version() -> str:
    """The installed distribution's version (a source tree run without installing has none)."""
    from importlib import metadata  # only for --version: importing and scanning take ~30 ms per command

    try:
        return metadata.version("binlake")
    except metadata.PackageNotFoundError:
        return "(not installed)"


class _VersionAction(argparse.Action):
    """``--version``: the version looked up only when asked for."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog} {_version()}")
        parser.exit()


def _ran(run: dict | None) -> str:
    """When a maintenance step last ran, to the second (what it did is printed below the table)."""
    return run["at"][:19].replace("T", " ") if run else "never"


def _lag(r: dict) -> str:
    if r.get("lag_bytes") is None:
        return "unknown"
    return f"{r['lag_seconds']:.0f} s, {r['lag_bytes']:,} bytes"


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``binlake`` console script."""
    parser = argparse.ArgumentParser(prog="binlake", description="MySQL → Delta Lake change data capture")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG")
    parser.add_argument("--version", action=_VersionAction, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, fn, help_ in (
        ("validate", cmd_validate, "check config, connectivity, privileges and server settings"),
        ("snapshot", cmd_snapshot, "snapshot every captured table (resumable)"),
        ("stream", cmd_stream, "stream the binlog into Delta from the committed offsets"),
        ("run", cmd_run, "snapshot where needed, then stream until stopped (SIGINT/SIGTERM)"),
        ("status", cmd_status, "per table: phase, rows, committed position, lag"),
        ("backfill", cmd_backfill, "read a table (or a key range) again while the stream runs"),
        ("reconcile", cmd_reconcile, "compare each table with MySQL by per-chunk counts and checksums "
                                     "(exit 1 when chunks differ)"),
        ("resync", cmd_resync, "after the stream's binlog position was purged: restart at the binlog end and "
                               "backfill every table online"),
        ("maintain", cmd_maintain, "compact and vacuum the pipeline's Delta tables now (by the running stream, "
                                   "else here)"),
    ):
        p = sub.add_parser(name, help=help_)
        p.add_argument("-c", "--config", required=True, help="binlake YAML config file")
        p.set_defaults(func=fn)
        if name == "stream":
            p.add_argument("--until", choices=["now"], help="stop after applying the binlog up to its end at start")
            p.add_argument("--max-seconds", type=float, help="stop cleanly after this many seconds")
        if name in ("snapshot", "stream", "status", "reconcile"):
            p.add_argument("--json", action="store_true", help="machine-readable output: one JSON object on stdout")
        if name == "backfill":
            p.add_argument("--table", help="the captured source table (db.table)")
            p.add_argument("--from", dest="lo", metavar="KEY", help="only chunk-key values at or above KEY")
            p.add_argument("--to", dest="hi", metavar="KEY", help="only chunk-key values below KEY")
            p.add_argument("--no-wait", action="store_true", help="return once the request is stored")
            p.add_argument("--list", action="store_true", help="list the pipeline's backfill requests")
            p.add_argument("--cancel", metavar="ID", help="cancel a request")
            p.add_argument("--pause", metavar="ID", help="pause a request")
            p.add_argument("--resume", metavar="ID", help="resume a paused request")
        if name == "maintain":
            p.add_argument("--table", metavar="DB.TABLE", help="only this table (default: every table of the pipeline)")
        if name == "resync":
            p.add_argument("--no-wait", action="store_true", help="return once the backfills are requested")
        if name == "reconcile":
            p.add_argument("--table", action="append", metavar="DB.TABLE",
                           help="only this captured table (repeatable); default: every captured table")
            p.add_argument("--rechecks", type=int, default=3,
                           help="times a differing chunk is checked again before it is reported (default 3)")
            p.add_argument("--recheck-wait", type=float, default=2.0,
                           help="seconds between the checks of a differing chunk (default 2)")
            p.add_argument("--repair", action="store_true",
                           help="backfill each chunk that differs (by the running stream, else here) and wait")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except SystemExit as e:
        return int(e.code or 0)
    except KeyboardInterrupt:
        err.print("interrupted")
        return EXIT_RUNTIME
    except BinlakeError as e:  # the taxonomy says what kind of failure: bad input exits 2, runtime 1
        logging.getLogger("binlake").debug("failure", exc_info=True)
        _line("[red]✗[/red]" if e.exit_code == EXIT_BAD_INPUT else "[red]error[/red]:", str(e))
        return e.exit_code
    except Exception as e:  # noqa: BLE001 - the CLI's last line of defence: one clear line, exit 1
        logging.getLogger("binlake").debug("failure", exc_info=True)
        _line("[red]error[/red]:", _explain(e))
        return EXIT_RUNTIME


def _explain(e: BaseException) -> str:
    """One line for an unexpected error: its type and first line (for a wrapped Python traceback,
    its last line) and the step it happened in (the notes binlake adds, cdc_core/retry.py), with
    what to do when the lake's disk is full."""
    text = str(e).strip()
    lines = text.splitlines() or [""]
    if "Traceback (most recent call last)" in text:  # an error from a Spark worker
        last = [x for x in lines if x and not x[0].isspace() and ":" in x]
        line = last[-1] if last else lines[0]
    else:
        line = f"{type(e).__name__}: {lines[0]}"
    notes = getattr(e, "__notes__", None)
    if notes:
        line += f" ({'; '.join(notes)})"
    if "No space left on device" in text or "os error 28" in text:
        line += ("; the lake's disk is full: nothing is half-committed (every commit is atomic); free space and "
                 "run the same command again to resume")
    return line


def run() -> None:
    """Console-script entry: run ``main`` and leave the process without interpreter teardown.

    Arrow's C++ scanner threads (behind delta-rs's ``to_pyarrow_table``) can still be joinable
    when the interpreter tears down, and then the process aborts with SIGABRT ("terminate called
    without an active exception", apache/arrow#34314) after all work is done, turning exit 0 or 2
    into -6. Every output is flushed first; nothing else is pending once ``main`` has returned.
    """
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
