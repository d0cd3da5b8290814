"""Backfill requests as the command line and the Dagster jobs make them: checked against the source, stored
in ``_binlake/backfill_requests`` for the stream process (the pipeline's only writer) to
work on, paused, resumed, cancelled and waited for (the algorithm: cdc_core/chunks/incremental.py);
and the tables a scheduled backfill's regexes select when it ticks (``select_tables``)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from cdc_core.chunks.incremental import BackfillRequest, BackfillState, key_value
from cdc_core.chunks.planning import chunk_key
from cdc_core.config import BinlakeConfig
from cdc_core.errors import BadInput, BinlakeError, TerminalError
from cdc_core.routes import Router
from cdc_core.schema.table import TableSchema
from cdc_core.source.connection import captured_tables, connect, connection_settings, describe_captured
from pipelines.lake.control_store import ControlStore


def request_backfill(cfg: BinlakeConfig, table: str, lo: str | None = None, hi: str | None = None
                     ) -> BackfillRequest:
    """Store a request to backfill ``table`` (keys in ``[lo, hi)`` of its chunk key when given, as
    typed on a command line); refused as :func:`request_backfills` refuses."""
    return request_backfills(cfg, [(table, lo, hi)])[0]


def request_backfills(cfg: BinlakeConfig, wanted: list[tuple[str, str | None, str | None]]
                      ) -> list[BackfillRequest]:
    """Store a request per ``(table, lo, hi)`` of ``wanted`` (keys in ``[lo, hi)`` of the table's
    chunk key when given, as typed on a command line or in run config), in that order. Every
    entry is checked before anything is stored: bad input (a table not captured or missing, no
    row key, a routed table, a bound that is not a value of the key) stores nothing, and the
    ``BadInput`` names every refused entry."""
    schemas, refused = _schemas(cfg, [table for table, _, _ in wanted])
    problems, ranges = list(refused.values()), []
    for table, lo, hi in wanted:
        if table not in schemas:
            continue
        col = schemas[table].column(chunk_key(schemas[table], cfg.source.snapshot.chunk_key_columns))
        try:
            ranges.append((table, key_value(col, lo) if lo is not None else None,
                           key_value(col, hi) if hi is not None else None))
        except BadInput as e:
            problems.append(f"{table}: {e}")
    if problems:
        raise BadInput("; ".join(problems))
    return _store(cfg, [BackfillRequest.new(table, lo, hi).next() for table, lo, hi in ranges])


def request_ranges(cfg: BinlakeConfig, table: str, ranges: list[tuple[Any, Any]], reason: str = "requested"
                   ) -> list[BackfillRequest]:
    """Store one request per key range ``[lo, hi)`` of ``table`` (values of its chunk key, e.g.
    the chunks a reconciliation found different; None: unbounded)."""
    _, problems = _schemas(cfg, [table])
    if problems:
        raise BadInput(problems[table])
    return _store(cfg, [BackfillRequest.new(table, lo, hi, reason).next() for lo, hi in ranges])


def _store(cfg: BinlakeConfig, requests: list[BackfillRequest]) -> list[BackfillRequest]:
    if requests:  # one commit: a launch's requests are all stored or none, and a reader sees them together
        ControlStore.of(cfg).save_backfill(*requests)
    return requests


def request_repairs(cfg: BinlakeConfig, report) -> tuple[list[BackfillRequest], dict[str, str]]:
    """A backfill request per chunk a reconciliation (``ReconcileReport``) found different;
    and the tables that cannot be backfilled online, with why."""
    requests, refused = [], {}
    for r in report.tables:
        if r.mismatches:
            try:
                requests += request_ranges(cfg, r.table, [(m.lo, m.hi) for m in r.mismatches],
                                           reason="reconcile --repair")
            except BinlakeError as e:
                refused[r.table] = str(e)
    return requests, refused


def refusal(cfg: BinlakeConfig, table: str, schema: TableSchema | None = None, *, described: bool = False
            ) -> str | None:
    """Why ``table`` cannot be backfilled online, or None: not captured, routed, and, once
    ``described`` (``schema`` None: it is not on the source), missing or without a row key.
    The command line refuses with it; the stream fails a request with it."""
    if not cfg.source.captures(table):
        return f"{table} is not captured by this pipeline (source.tables / exclude_tables)"
    router = Router(cfg.routes)
    if router.routed(table):
        return f"{table} is routed into {router.sink(table)}: routed tables cannot be backfilled online yet"
    if described and schema is None:
        return f"{table} does not exist on the source"
    if described and not schema.row_key:
        return (f"{table} has no row key (primary key, NOT NULL unique key or source.key_columns): it cannot be "
                "backfilled online; give it one, or re-snapshot it")
    return None


def _schemas(cfg: BinlakeConfig, tables: list[str]) -> tuple[dict[str, TableSchema], dict[str, str]]:
    """The schemas of those of ``tables`` that can be backfilled online, and why each other
    cannot (:func:`refusal`); the source is asked once, only about the captured tables."""
    problems = {t: p for t in tables if (p := refusal(cfg, t)) is not None}
    asked = [t for t in dict.fromkeys(tables) if t not in problems]
    if not asked:
        return {}, problems
    with connect(connection_settings(cfg)) as conn, conn.cursor() as cur:
        found = describe_captured(cur, asked, cfg.source)
    for t in asked:
        problem = refusal(cfg, t, found.get(t), described=True)
        if problem:
            problems[t] = problem
    return {t: found[t] for t in asked if t not in problems}, problems


def change_state(cfg: BinlakeConfig, request_id: str, state: BackfillState) -> BackfillRequest:
    """Pause, resume (back to pending) or cancel a request; a finished one cannot change."""
    store = ControlStore.of(cfg)
    req = next((r for r in store.backfills() if r.id == request_id), None)
    if req is None:
        raise BadInput(f"no backfill request {request_id!r} in pipeline {cfg.pipeline.name} "
                       "(`binlake backfill --list` shows them)")
    if req.state.terminal:
        raise BadInput(f"backfill {request_id} is {req.state}: it cannot change any more")
    if state == BackfillState.PENDING and req.state != BackfillState.PAUSED:
        raise BadInput(f"backfill {request_id} is {req.state}, not paused")
    # A resumed request starts over from its chunk plan's next chunk (its state says where).
    target = BackfillState.RUNNING if state == BackfillState.PENDING and req.chunks else state
    new = req.next(state=target)
    store.save_backfill(new)
    return new


def wait_for(cfg: BinlakeConfig, request_ids: list[str], on_progress: Callable[[list[BackfillRequest]], None],
             seconds: float, poll_seconds: float = 1.0) -> list[BackfillRequest]:
    """Wait up to ``seconds`` for another process (the running stream) to finish, fail or cancel
    the requests (or for one to be paused); ``on_progress`` sees each state read. Returns the
    last states read."""
    store = ControlStore.of(cfg)
    deadline = time.monotonic() + seconds
    while True:
        reqs = _states(cfg, store, request_ids)
        on_progress(reqs)
        if all(r.state.terminal for r in reqs) or any(r.state == BackfillState.PAUSED for r in reqs) \
                or time.monotonic() >= deadline:
            return reqs
        time.sleep(poll_seconds)


def current(cfg: BinlakeConfig, request_ids: list[str]) -> list[BackfillRequest]:
    """The requests' current states."""
    return _states(cfg, ControlStore.of(cfg), request_ids)


def _states(cfg: BinlakeConfig, store: ControlStore, request_ids: list[str]) -> list[BackfillRequest]:
    """The requests' states as ``store`` holds them now; a request that is gone (the lake's
    ``_binlake/`` was removed or replaced while waiting) is an error naming it."""
    by_id = {r.id: r for r in store.backfills()}
    gone = [i for i in request_ids if i not in by_id]
    if gone:
        raise TerminalError(f"backfill request {', '.join(gone)} is no longer in pipeline {cfg.pipeline.name}'s "
                            f"control tables ({cfg.sink.path}/_binlake was removed or replaced while waiting)")
    return [by_id[i] for i in request_ids]


@dataclass(frozen=True)
class TableSelection:
    """What a list of regexes selects on the source: the captured tables they match, and each
    regex that matches none with why (``{regex: reason}``)."""

    tables: list[str]
    unmatched: dict[str, str]


def select_tables(cfg: BinlakeConfig, patterns: list[str], known: Iterable[str] = ()) -> TableSelection:
    """The captured tables on the source that ``patterns`` (regexes over "db.table", full match)
    select, in name order; a regex that selects none is named, with the tables it matched in
    ``known`` (the table catalog, the lake) that are no longer on the source."""
    with connect(connection_settings(cfg), connect_timeout=10) as conn, conn.cursor() as cur:
        on_source = captured_tables(cfg, cur)
    selected, unmatched = set(), {}
    for p in patterns:
        found = [t for t in on_source if re.fullmatch(p, t)]
        selected.update(found)
        if not found:
            gone = sorted({t for t in known if re.fullmatch(p, t)})
            unmatched[p] = (f"{', '.join(gone)} no longer on the source" if gone
                            else "matches no captured table on the source")
    return TableSelection(sorted(selected), unmatched)
