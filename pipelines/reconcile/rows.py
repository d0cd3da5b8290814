"""Row-by-row comparison of a Delta table with its MySQL source table.

MySQL rows are read over pymysql (a different client than the snapshot's bulk
reader) and brought to binlake's canonical values with the binlog path's
conversion, so a match means both paths agree with the server. A routed source
table is compared with its rows in the route's sink (``_cdc_source`` = the source),
on the source's own columns.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from cdc_core.config import BinlakeConfig
from cdc_core.routes import Router
from cdc_core.schema.output import delta_name
from cdc_core.schema.table import TableSchema, describe_table, quote_ident
from cdc_core.source.capture import without_excluded
from cdc_core.types.mapping import binlog_value, text_select_expr
from pipelines.lake.reads import dataset, live_filter, source_filter
from pipelines.lake.tables import require_table, table_uri


@dataclass
class TableDiff:
    table: str
    mysql_rows: int = 0
    delta_rows: int = 0
    missing: list = field(default_factory=list)  # keys in MySQL, not in Delta
    extra: list = field(default_factory=list)  # keys in Delta, not in MySQL
    different: list = field(default_factory=list)  # (key, column, mysql value, delta value)

    @property
    def equal(self) -> bool:
        return not (self.missing or self.extra or self.different) and self.mysql_rows == self.delta_rows

    def describe(self, limit: int = 5) -> str:
        if self.equal:
            return f"{self.table}: {self.mysql_rows} rows equal"
        return (f"{self.table}: MySQL {self.mysql_rows} rows, Delta {self.delta_rows}; missing {self.missing[:limit]}, "
                f"extra {self.extra[:limit]}, different {self.different[:limit]}")


def canonical_value(col, v):
    """A value as pymysql returns it, in binlake's canonical form."""
    if v is not None and col.data_type == "float":
        return struct.unpack("f", struct.pack("f", v))[0]  # Delta holds FLOAT as float32
    return binlog_value(col, v)


def mysql_rows(cursor, schema: TableSchema) -> list[tuple]:
    """All rows of the source table in canonical form (session time zone must be UTC)."""
    cols = ", ".join(text_select_expr(c) for c in schema.columns)
    cursor.execute(f"SELECT {cols} FROM {quote_ident(schema.database)}.{quote_ident(schema.table)}")
    return [tuple(canonical_value(c, v) for c, v in zip(schema.columns, row)) for row in cursor.fetchall()]


def delta_rows(uri: str, schema: TableSchema, source: str | None = None,
               storage_options: dict[str, str] | None = None) -> list[tuple]:
    """All rows of the Delta table at ``uri`` (opened with the sink's ``storage_options``) that
    MySQL holds (a soft_delete table's live rows, a history table's current versions), source
    columns only; with ``source``, only the rows of that routed source table."""
    rows = dataset(require_table(uri, storage_options))
    columns = [delta_name(rows.schema.names, c.name) or c.name for c in schema.columns]  # names are case-insensitive
    t = rows.to_table(columns=columns, filter=source_filter(source) if source else live_filter(rows.schema.names))
    return [tuple(r[c] for c in columns) for r in t.to_pylist()]


def compare(cursor, schema: TableSchema, uri: str, source: str | None = None,
            storage_options: dict[str, str] | None = None) -> TableDiff:
    """Compare MySQL and Delta row by row, keyed by primary key (whole row without one).
    ``source``: the table is routed into ``uri``; only the rows of ``source`` are compared."""
    names = [c.name for c in schema.columns]
    key_idx = [names.index(k) for k in schema.row_key] or list(range(len(names)))
    src, dst = mysql_rows(cursor, schema), delta_rows(uri, schema, source, storage_options)
    diff = TableDiff(schema.qualified_name, len(src), len(dst))

    def keyed(rows):
        out: dict = {}
        for r in rows:
            out.setdefault(tuple(r[i] for i in key_idx), []).append(r)
        return out

    a, b = keyed(src), keyed(dst)
    diff.missing = [k for k in a if k not in b]
    diff.extra = [k for k in b if k not in a]
    for k in a.keys() & b.keys():
        ra, rb = sorted(a[k], key=repr), sorted(b[k], key=repr)
        if len(ra) != len(rb):
            diff.different.append((k, "<row count>", len(ra), len(rb)))
            continue
        for x, y in zip(ra, rb):
            for name, vx, vy in zip(names, x, y):
                if vx != vy:
                    diff.different.append((k, name, vx, vy))
    return diff


def compare_table(cursor, cfg: BinlakeConfig, name: str) -> TableDiff:
    """Compare captured table ``name`` ("db.table") with its Delta table, following routes."""
    router = Router(cfg.routes)
    schema = without_excluded(describe_table(cursor, *name.split(".", 1)), cfg.source)  # captured columns only
    return compare(cursor, schema, table_uri(cfg.sink.path, router.sink(name)), name if router.routed(name) else None,
                   cfg.sink.storage_options)
