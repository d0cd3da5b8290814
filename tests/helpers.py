"""Test helpers: run a snapshot and compare every captured table with MySQL."""

from __future__ import annotations

import os
import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from cdc_core.config import BinlakeConfig, StreamConfig
from cdc_core.routes import Router
from cdc_core.schema.table import describe_table
from cdc_core.source.connection import connect, connection_settings
from pipelines.lake.tables import table_uri
from pipelines.snapshot.driver import SnapshotJob
from tests.oracle_rows import DeltaSide, TableDiff, compare_table

if TYPE_CHECKING:
    from pipelines.stream import StreamEngine
    from pipelines.stream.state import StreamSummary

PASSWORD_VAR = "BINLAKE_TEST_PASSWORD"  # conftest's make_config sets it to the test server's password
# What assert_equal compared in this session (conftest prints it): tables and rows found equal.
COMPARED: Counter = Counter()


def batches_as_set(stream: dict) -> dict:
    """``stream`` settings whose batch limits also hold while the stream reads a backlog: a
    test that sets ``max_batch_rows`` or ``max_batch_seconds`` to get several batches gets
    them however old its changes are when read (cdc_core/batch/micro_batch.py: BatchPolicy). A
    test of the catch-up limits sets them itself."""
    if {"max_batch_rows", "max_batch_seconds"} & stream.keys() and not {
            "catchup_batch_rows", "catchup_batch_seconds"} & stream.keys():
        live = StreamConfig(**{k: v for k, v in stream.items() if k.startswith("max_batch_")})
        return {**stream, "catchup_batch_rows": live.max_batch_rows, "catchup_batch_seconds": live.max_batch_seconds}
    return stream


def write_config_file(cfg: BinlakeConfig, path: Path, **extra) -> str:
    """``cfg`` as a YAML file for the CLI or Dagster, the password as ``${BINLAKE_TEST_PASSWORD}``
    and each secret storage option as ``${BINLAKE_TEST_<KEY>}`` (set in this process's environment,
    which the CLI's subprocesses inherit)."""
    raw = cfg.model_dump(mode="json")
    raw["source"]["password"] = "${" + PASSWORD_VAR + "}"
    options = raw["sink"]["storage_options"]
    for key, value in options.items():
        if value in cfg.sink.secret_values():
            os.environ[f"BINLAKE_TEST_{key.upper()}"] = value
            options[key] = "${BINLAKE_TEST_" + key.upper() + "}"
    raw.update(extra)
    path.write_text(yaml.safe_dump(raw))
    return str(path)


class Worker(threading.Thread):
    """``target(*args)`` in a daemon thread that keeps what it returned or raised: ``join``
    raises its exception in the test's thread, so a writer that failed (a lost connection, a
    statement the server refused) fails the test instead of leaving it to pass on less work."""

    def __init__(self, target, *args, name: str = "worker"):
        super().__init__(name=name, daemon=True)  # daemon: a failed test does not hang the session
        self._call = (target, args)
        self.result = None
        self.error: BaseException | None = None

    def run(self) -> None:
        target, args = self._call
        try:
            self.result = target(*args)
        except BaseException as e:  # noqa: BLE001 - raised again in the test's thread by join()
            self.error = e

    def join(self, timeout: float | None = 120):
        """What the target returned, once it has; its exception if it raised."""
        super().join(timeout)
        if self.is_alive():
            raise AssertionError(f"{self.name} did not end within {timeout} s")
        if self.error is not None:
            raise self.error
        return self.result


class EngineThread(Worker):
    """``engine.run()`` in a daemon thread that keeps what it returned or raised. A bare
    thread only prints an engine's exception, so a test would go on as if the engine had
    stopped cleanly; ``join`` and ``stop`` raise it in the test's thread."""

    def __init__(self, engine: StreamEngine):
        super().__init__(engine.run, name="engine")
        self.engine = engine

    @property
    def summary(self) -> StreamSummary | None:
        """The engine's summary once it has ended."""
        return self.result

    def stop(self, timeout: float | None = 120) -> StreamSummary:
        """Request a stop and join."""
        self.engine.request_stop()
        return self.join(timeout)

    def wait_streaming(self, timeout: float = 60) -> None:
        """Until the engine streams (its start is done); its exception if it ended first."""
        deadline = time.monotonic() + timeout
        while self.engine.life.state != "streaming":
            if not self.is_alive():
                self.join()
                raise AssertionError(f"the engine ended before streaming: {self.summary}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the engine was not streaming after {timeout} s")
            time.sleep(0.05)


def wait_for(predicate, timeout: float, what: str, interval: float = 0.1):
    """``predicate()``'s first true value, polled every ``interval`` s; a failure naming ``what``
    when it is still false after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        v = predicate()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def snapshot(cfg: BinlakeConfig, spark):
    return SnapshotJob(cfg, spark).run()


def diff_tables(cfg: BinlakeConfig, names: list[str], widened: bool = False) -> list[TableDiff]:
    """Row-by-row and type-by-type diffs of the captured tables ``names`` (a routed table: its
    rows in the sink) by the oracle of tests/oracle_rows.py; ``widened``: a Delta column may
    have a type holding more than the documented one (a type change, a route's sources)."""
    router = Router(cfg.routes)
    server = connection_settings(cfg).pymysql_kwargs()
    excluded = cfg.source.exclude_columns  # regexes over "db.table.column", matched in full

    def side(name: str) -> DeltaSide:
        sink = router.sink(name)
        return DeltaSide(table_uri(cfg.sink.path, sink), cfg.sink.storage_options or None,
                         name if router.routed(name) else None, cfg.sink.mode_of(sink))

    return [compare_table(server, n, side(n), widened=widened,
                          excluded=lambda c: any(re.fullmatch(p, c) for p in excluded)) for n in names]


def assert_equal(cfg: BinlakeConfig, names: list[str], widened: bool = False) -> None:
    """Every table of ``names`` equal in Delta and MySQL (:func:`diff_tables`)."""
    diffs = diff_tables(cfg, names, widened)
    bad = [d.describe() for d in diffs if not d.equal]
    assert not bad, "\n".join(bad)
    assert all(d.mysql_rows == d.delta_rows for d in diffs)
    COMPARED["tables"] += len(diffs)
    COMPARED["rows"] += sum(d.mysql_rows for d in diffs)


def replay_handoff(cfg: BinlakeConfig, names: list[str]) -> dict[str, dict]:
    """Delta rows of each table with the binlog replayed from the lowest chunk LW to the
    server's current end through the hand-off filter, its keys in the server's order as the
    stream has them: the table as the stream will see it.
    Returns {table: {primary key: canonical row tuple}}."""
    from cdc_core.binlog.range_reads import read_changes
    from cdc_core.chunks.handoff import HandoffFilter
    from cdc_core.offset.position import master_position
    from cdc_core.types.key_order import KeyOrders, ServerSql
    from cdc_core.types.mapping import binlog_value
    from pipelines.lake.control_store import ControlStore
    from pipelines.lake.tables import open_table
    from pipelines.reconcile.rows import delta_rows

    store = ControlStore.of(cfg)
    plans = store.load_plans()
    settings = connection_settings(cfg)
    with connect(settings) as conn, conn.cursor() as cur:
        schemas = {n: describe_table(cur, *n.split(".", 1)) for n in names}
        end = master_position(cur)
        orders = KeyOrders(ServerSql.on(conn))
        states, filters, lows = {}, {}, []
        for n, schema in schemas.items():
            uri = table_uri(cfg.sink.path, n)
            done = store.completed_chunks(n, open_table(uri, cfg.sink.storage_options))
            lows += [r.low_watermark for r in done.values()]
            filters[n] = HandoffFilter.for_table(schema, plans[n], {
                i: r.high_watermark for i, r in done.items()}, orders)
            idx = [c.name for c in schema.columns]
            pk = [idx.index(k) for k in schema.primary_key]
            rows = delta_rows(uri, schema, storage_options=cfg.sink.storage_options)
            states[n] = {tuple(r[i] for i in pk): r for r in rows}
            assert len(states[n]) == len(rows), f"{n}: duplicate keys in Delta"

        for ch in read_changes(settings, cfg.source.server_id + 99, min(lows), end,
                               {tuple(n.split(".", 1)) for n in names}):
            n = f"{ch.database}.{ch.table}"
            schema, f, state = schemas[n], filters[n], states[n]
            cols = {c.name: c for c in schema.columns}
            images = [(img, is_after) for img, is_after in ((ch.before, False), (ch.after, True)) if img is not None]
            dropped = f.drops([binlog_value(cols[f.key], img[f.key]) for img, _ in images], ch.position)
            for (img, is_after), drop in zip(images, dropped, strict=True):
                if drop:
                    continue
                pk = tuple(binlog_value(cols[k], img[k]) for k in schema.primary_key)
                if is_after:
                    state[pk] = tuple(binlog_value(c, img[c.name]) for c in schema.columns)
                else:
                    state.pop(pk, None)
    return states


def _uuid(i: int) -> str:
    """A UUID of any version and variant MariaDB takes (versions 1-5 with the RFC variant are
    stored with their groups reversed): text order and stored order differ."""
    import random
    import uuid

    rng = random.Random(i)
    b = bytearray(rng.randbytes(16))
    b[6] = (b[6] & 0x0F) | (rng.choice([0, 1, 1, 2, 4, 4, 5, 6, 7, 7, 8, 15]) << 4)
    b[8] = (b[8] & 0x3F) | rng.choice([0x80, 0x80, 0xC0, 0x40] if b[6] >= 0x80 else [0, 0x40, 0x80, 0x80, 0xC0])
    return str(uuid.UUID(bytes=bytes(b)))


def _inet6(i: int) -> str:
    forms = (f"::ffff:{i % 256}.{i * 7 % 256}.0.{i % 9}", f"::{i % 256}.1.2.{i % 5}", f"2001:db8::{i:x}",
             f"fe80::{i * 13:x}:1", f"{i % 16:x}::", "::", "::1", f"::{i:x}")
    return forms[i % len(forms)]


_ENUM_MEMBERS = tuple(f"m{(i * 37) % 100:02d}" for i in range(60)) + ("z😀y", "a😀", "", "?", "A b")
_SET_MEMBERS = ("h", "b", "a", "g", "c", "f", "d", "e")

# Chunk-key types whose server order is not their text's (or whose bound the server returns in
# another form than the binlog's value): (column type, the i-th value to insert, as pymysql takes it).
KEY_TYPES = [
    ("ENUM(" + ",".join("'" + m + "'" for m in _ENUM_MEMBERS if m) + ")",
     lambda i: _ENUM_MEMBERS[(i * 7) % len(_ENUM_MEMBERS)]),  # '': the error value (INSERT IGNORE)
    ("SET(" + ",".join(f"'{m}'" for m in _SET_MEMBERS) + ")",
     lambda i: ",".join(m for b, m in enumerate(_SET_MEMBERS) if (i * 37) % 256 >> b & 1)),
    ("UUID", _uuid),
    ("INET6", _inet6),
    ("INET4", lambda i: f"{(i * 37) % 256}.{i % 7}.{(i * 11) % 256}.{i % 3}"),
    ("TIME(3)", lambda i: f"{'-' if i % 3 == 0 else ''}{(i * 7) % 839}:{i % 60:02d}:{i % 59:02d}.{i % 1000:03d}"),
    ("YEAR", lambda i: 0 if i == 0 else 1901 + (i * 37) % 255),
    ("BIT(12)", lambda i: (i * 37) % 4096),
    ("FLOAT", lambda i: (i - 150) * 1.2345678 + (i % 3) * 1e-6),
]
