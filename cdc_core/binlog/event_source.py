"""The event source: what the binlog event loop (cdc_core/binlog/event_loop.py) reads.

The seam, kept small so that a source other than a server (recorded binlog bytes) can
feed the same loop:

- ``EventSource``: an iterable of python-mysql-replication event objects in binlog order
  whose ``log_file`` and ``log_pos``, read right after it yields an event, are that
  event's file and end position (after a rotate: the new file and the position it names);
  ``close()`` ends it. ``BinLogStreamReader`` is one as it is.
- ``SourceRequest``: what the loop asks a source for: the start (a transaction boundary),
  the library event classes it handles (a source may yield others: the loop passes over
  them), and ``tables``, which tables' row events it reads (a hint: a source may yield
  other tables' too, the loop asks ``tables`` again on each row event).
- ``Opener``: a function from a request to an open source; ``server_source`` is the one
  that reads a server's binlog over a replication connection.

Invariants:
- A server source reads from the requested position as a blocking replica (it waits at the
  binlog's end; the loop stops it at its end position) and returns every event it does not
  know as ``NotImplementedEvent`` (``filter_non_implemented_events=False``): the loop decides
  whether one may be passed over (cdc_core/binlog/undecodable.py).
- ``TableFilter`` asks its predicate once per table (tests/test_event_loop.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from pymysqlreplication import BinLogStreamReader

import cdc_core.binlog.table_maps  # noqa: F401 - the library's table maps parsed once per body
from cdc_core.offset.position import BinlogPosition
from cdc_core.source.connection import ConnectionSettings


class TableFilter:
    """Which tables' row events a reader reads: ``decide(schema, table)``, asked once per
    table. It is also the library's ``only_tables``/``only_schemas`` (``views``), so row
    events of other tables are never decoded and tables created later are decided too."""

    def __init__(self, decide: Callable[[str, str], bool]) -> None:
        self._decide = decide
        self._cache: dict[tuple[str, str], bool] = {}

    def __call__(self, schema: str, table: str) -> bool:
        key = (schema, table)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._decide(schema, table)
        return hit

    def views(self) -> tuple[object, object]:
        """(only_schemas, only_tables) for BinLogStreamReader. The library asks ``table in
        only_tables`` and then ``schema in only_schemas`` of each table map and row event: the
        first view remembers the table, the second decides on both."""
        seen: list[str] = [""]
        decide = self

        class _Tables:
            def __contains__(self, table: str) -> bool:
                seen[0] = table
                return True

        class _Schemas:
            def __contains__(self, schema: str) -> bool:
                return decide(schema, seen[0])

        return _Schemas(), _Tables()


@dataclass(frozen=True)
class SourceRequest:
    """What the loop asks of a source (see the module docstring)."""

    start: BinlogPosition
    events: frozenset[type]
    tables: TableFilter | None = None


class EventSource(Protocol):
    """Library events in binlog order; ``log_file``/``log_pos``: the last one's file and end."""

    log_file: str
    log_pos: int

    def __iter__(self) -> Iterator[object]: ...

    def close(self) -> None: ...


Opener = Callable[[SourceRequest], EventSource]


def open_binlog(conn: ConnectionSettings, server_id: int, start: BinlogPosition, **options) -> BinLogStreamReader:
    """A blocking replication reader from ``start`` (a transaction boundary); the caller
    stops it itself at its end position."""
    return BinLogStreamReader(
        connection_settings=conn.pymysql_kwargs(),
        server_id=server_id,
        is_mariadb=False,  # with True, MariaDB resumes by GTID only and ignores log_file/log_pos
        log_file=start.file,
        log_pos=start.pos,
        resume_stream=True,
        blocking=True,  # non-blocking reconnects from the first binlog at its end
        **options,
    )


def server_source(conn: ConnectionSettings, server_id: int, **options) -> Opener:
    """An opener of the server's binlog as replica ``server_id``; ``options`` go to
    BinLogStreamReader (``slave_heartbeat``, ``report_slave``, ``enable_logging``)."""

    def open_source(request: SourceRequest) -> EventSource:
        schemas, tables = request.tables.views() if request.tables is not None else (None, None)
        return open_binlog(conn, server_id, request.start, only_events=list(request.events),
                           filter_non_implemented_events=False, only_schemas=schemas, only_tables=tables, **options)

    return open_source
