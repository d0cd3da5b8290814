"""The captured tables the Dagster code location is built from, kept as state so that
definitions load without the source: discovered from MySQL once (``discover``), saved as
JSON, and refreshed on demand (``dg utils refresh-defs-state``, the job
``binlake_refresh_tables``) or by the stream job when the schema history shows a table
it does not list.

Invariants (tests/test_dagster_defs.py):
- ``SourceCatalog.read``, ``lake_tables`` and ``lake_columns`` never connect to the source;
  a lake that cannot be read leaves the catalog's own schemas in place.
- A table's columns are the Delta table's own (what the asset holds: lenient schema
  changes keep dropped columns, the reserved ``_cdc_`` columns follow); before its Delta
  table exists, the columns the snapshot will write.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cdc_core.config import BinlakeConfig
from cdc_core.routes import Router
from cdc_core.schema.modes import SinkColumns
from cdc_core.schema.output import output_schema
from cdc_core.schema.table import TableSchema, describe_table
from cdc_core.source.capture import without_excluded
from cdc_core.source.connection import captured_tables, connect, connection_settings
from pipelines.lake.control_store import ControlStore
from pipelines.lake.log_schema import table_schema
from pipelines.lake.tables import delta_columns, table_uri

log = logging.getLogger(__name__)

CATALOG_VERSION = 1


@dataclass(frozen=True)
class SourceCatalog:
    """The captured tables of one pipeline as discovered from the source."""

    pipeline: str
    discovered_at: str  # ISO time of the discovery
    tables: tuple[TableSchema, ...]

    @property
    def names(self) -> list[str]:
        return [t.qualified_name for t in self.tables]

    def to_json(self) -> str:
        return json.dumps({"version": CATALOG_VERSION, "pipeline": self.pipeline,
                           "discovered_at": self.discovered_at,
                           "tables": [json.loads(t.to_json()) for t in self.tables]}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> SourceCatalog:
        d = json.loads(text)
        if d.get("version") != CATALOG_VERSION:
            raise ValueError(f"binlake table catalog version {d.get('version')} is not {CATALOG_VERSION}: refresh it")
        return cls(d["pipeline"], d["discovered_at"],
                   tuple(TableSchema.from_json(json.dumps(t)) for t in d["tables"]))

    def write(self, path: str | Path) -> None:
        """Save atomically (a reader never sees half a file)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".catalog-")
        with os.fdopen(fd, "w") as f:
            f.write(self.to_json())
        os.replace(tmp, path)

    @classmethod
    def read(cls, path: str | Path | None) -> SourceCatalog | None:
        """The saved catalog, or None when there is none yet."""
        if path is None or not Path(path).is_file():
            return None
        return cls.from_json(Path(path).read_text())


def discover(cfg: BinlakeConfig, connect_timeout: float = 10) -> SourceCatalog:
    """Read the captured tables and their schemas from the source."""
    with connect(connection_settings(cfg), connect_timeout=connect_timeout) as conn, conn.cursor() as cur:
        tables = tuple(without_excluded(describe_table(cur, *n.split(".", 1)), cfg.source)
                       for n in captured_tables(cfg, cur))
    return SourceCatalog(cfg.pipeline.name, dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), tables)


def lake_tables(cfg: BinlakeConfig) -> dict[str, TableSchema]:
    """Tables the stream has captured, by name, with the source schema it recorded last
    (from ``_binlake/schema_history``; tables created after the discovery show up here; a
    dropped table keeps its asset, as its Delta table is kept)."""
    return ControlStore.of(cfg).recorded_schemas()


def current_tables(cfg: BinlakeConfig, catalog: SourceCatalog | None) -> list[TableSchema]:
    """The catalog's tables updated with what the lake recorded since (new tables, schema
    changes), in name order; the catalog alone when the lake cannot be read."""
    tables = {t.qualified_name: t for t in (catalog.tables if catalog else ())}
    try:
        tables.update(lake_tables(cfg))
    except Exception as e:  # noqa: BLE001 - an unreadable lake must not break the code location
        log.warning("binlake: schema history not readable (%s); using the table catalog as saved", e)
    return [tables[n] for n in sorted(tables) if cfg.source.captures(n)]


@dataclass(frozen=True)
class LakeColumn:
    """One column of a table's Delta table, with its source column type where it has one."""

    name: str
    delta_type: str  # Delta's type name: integer, long, decimal(10,2), timestamp_ntz...
    nullable: bool
    mysql_type: str | None  # COLUMN_TYPE in the source, None for reserved and dropped columns
    primary_key: bool


def lake_columns(cfg: BinlakeConfig, schema: TableSchema) -> list[LakeColumn]:
    """The columns of the table's Delta table (a routed table: its sink), or the ones the
    snapshot will write while there is none."""
    router = Router(cfg.routes)
    name = schema.qualified_name
    try:
        # from the Delta log, not an open of the table: the definitions read every table's columns
        arrow = table_schema(table_uri(cfg.sink.path, router.sink(name)), cfg.sink.storage_options)
    except Exception as e:  # noqa: BLE001 - see current_tables
        log.warning("binlake: Delta table of %s not readable (%s)", schema.qualified_name, e)
        arrow = None
    if arrow is None:  # the snapshot's columns, built only then (the definitions ask for every table)
        arrow = output_schema(schema, SinkColumns.of(cfg.sink, router.sink(name)).applied(schema, router.routed(name))
                              .fields())
    source = {c.name: c for c in schema.columns}
    return [LakeColumn(c.name, c.delta_type, c.nullable, source[c.name].column_type if c.name in source else None,
                       c.name in schema.primary_key) for c in delta_columns(arrow)]
