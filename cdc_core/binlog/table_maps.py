"""Table maps parsed once: the server writes a table map before each statement's rows (in every
transaction), and python-mysql-replication parses each one afresh (its columns, their optional
metadata, a ``Table`` of them): about a third of the stream reader process's CPU on a backlog of
inserts in 500-row transactions. Patched here (the binlog readers import this module): a table map
whose bytes equal one parsed before takes that parse's values, and the library's table cache
(``table_map``) gets the very same ``Table``, whose columns cdc_core/binlog/columns.py has already
prepared and whose decoding cdc_core/binlog/decoder.py finds by that object.

Invariants (tests/test_table_maps.py):
- The key is the event's body (after its common header, without its checksum: the table id, the
  database and table names, the column types and metadata, the optional metadata with the column
  names) and the reader's options that change the parse (its table and schema filters, the
  server's version and kind): equal keys parse to equal values. A table id the server reuses for
  another table (after a restart) or gives a table again after an ALTER comes with another body.
- An event built from the cache has every attribute a fresh parse gives it, equal to it; the
  per-event ones (its packet, timestamp, checksum check) are its own.
- A table map the library does not keep (a table its filters leave out), or whose column names
  are not in its body (binlog_row_metadata=MINIMAL: the library asks the server for them, and the
  answer changes with the server's tables), is never cached: it is parsed each time.
- At most ``CACHED_MAX`` bodies are kept; beyond, all are forgotten at once (parsed again on use).
"""

from __future__ import annotations

from pymysqlreplication.event import BinLogEvent
from pymysqlreplication.row_event import TableMapEvent

CACHED_MAX = 4096  # distinct table maps (tables × their versions) kept per process
_HEADER = 1 + 19  # the packet's OK byte and the event's common header
# What the parse's values must not carry from the first event to the others: the first event's
# packet and the reader's objects (the library starts a new table cache at every binlog file).
_NOT_PARSED = frozenset({"packet", "table_map", "_ctl_connection"})
_OPTIONS = ("only_tables", "ignored_tables", "only_schemas", "ignored_schemas", "optional_meta_data",
            "use_column_name_cache", "mysql_version")

_parsed: dict[tuple, dict] = {}
_library_init = TableMapEvent.__init__


def _options(kwargs: dict) -> tuple:
    return tuple(tuple(v) if isinstance(v, list | set | frozenset) else v for v in map(kwargs.get, _OPTIONS))


def _named(event) -> bool:
    """Whether a parsed table map's column names came from its body: without them the library asks
    the server's information_schema (binlog_row_metadata=MINIMAL), whose answer the body does not fix."""
    meta = getattr(event, "optional_metadata", None)
    return getattr(event, "table_obj", None) is not None and meta is not None and bool(meta.column_name_list)


def _init(self, from_packet, event_size, table_map, ctl_connection, **kwargs):
    if kwargs.get("freeze_schema"):  # the library keeps a table id's first map itself (binlake never asks)
        return _library_init(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
    body = bytes(from_packet.packet.get_all_data()[_HEADER:_HEADER + event_size])
    key = (body, _options(kwargs), ctl_connection._get_dbms())
    parsed = _parsed.get(key)
    if parsed is None:
        _library_init(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
        if self._processed and _named(self):
            if len(_parsed) >= CACHED_MAX:
                _parsed.clear()
            _parsed[key] = {k: v for k, v in vars(self).items() if k not in _NOT_PARSED}
        return
    BinLogEvent.__init__(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
    own = vars(self)
    for k, v in parsed.items():
        own.setdefault(k, v)  # the per-event attributes BinLogEvent just set stay this event's
    table_map[self.table_id] = self.table_obj


TableMapEvent.__init__ = _init
