"""``source.exclude_columns``: the columns of a captured table binlake leaves out, in one place.

Every caller that turns a described table (``cdc_core.schema.table.describe_table``, a
CREATE TABLE, the schema history) into what is captured passes it through
:func:`captured_schema`; schema changes pass through :func:`captured_change`. The stream
matches row values to the schema by column name, so a column missing from the captured
schema is dropped from every row image.

Invariants (tests/test_types.py: test_exclude_columns_through_snapshot_and_stream,
test_validate_names_what_leaves_a_column_out, test_exclude_columns_config):
- An excluded column is not in the snapshot's SELECT, not converted from the binlog, not
  in the Delta table and not in the schema history.
- What :func:`captured_schema` returns can be mapped and is identified as configured: a
  table's ``source.key_columns`` become its unique key (for a table without a primary key,
  NOT NULL columns only); a row-key column or a table's configured chunk key left out
  (updates and deletes are applied by key), or a column whose type binlake cannot map,
  raises :class:`NotCapturable` with one line per
  problem, each saying what to change.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from cdc_core.config import SourceConfig
from cdc_core.errors import BadInput
from cdc_core.schema.table import TableSchema
from cdc_core.types.mapping import unmappable

if TYPE_CHECKING:  # not imported at run time: validate need not load the DDL parser
    from cdc_core.schema.change import SchemaChange

log = logging.getLogger(__name__)


class NotCapturable(BadInput, ValueError):
    """A table that cannot be captured as configured; ``problems`` has one line per problem."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


def captured_schema(schema: TableSchema, source: SourceConfig) -> TableSchema:
    """``schema`` without the columns ``source.exclude_columns`` leaves out, checked (see the
    module invariants)."""
    name = schema.qualified_name
    configured = source.key_columns.get(name)
    schema, problems = _configured_key(schema, configured)
    if not configured and any(_out(schema.column(k), name, source) for k in schema.unique_key):
        schema = dataclasses.replace(schema, unique_key=())  # partly left out, it identifies nothing
    keys = {*schema.row_key, source.snapshot.chunk_key_columns.get(name)}
    problems += [f"source.exclude_columns leaves out {name}.{c.name}, a key column of {name} (its rows are "
                "identified by it): it cannot be excluded"
                for c in schema.columns if c.name in keys and _out(c, name, source)]
    schema = without_excluded(schema, source)
    problems += unmappable(schema)
    if problems:
        raise NotCapturable(problems)
    return schema


def _configured_key(schema: TableSchema, columns: list[str] | None) -> tuple[TableSchema, list[str]]:
    """``schema`` identified by ``source.key_columns`` (when set for it), or what is wrong with them."""
    if not columns:
        return schema, []
    name = schema.qualified_name
    if schema.primary_key:
        return schema, [f"source.key_columns names columns of {name}, which has a primary key "
                        f"({', '.join(schema.primary_key)}): its rows are identified by it; remove the entry"]
    by_name = {c.name.lower(): c for c in schema.columns}
    missing = [k for k in columns if k.lower() not in by_name]
    nullable = [k for k in columns if k.lower() in by_name and by_name[k.lower()].nullable]
    problems = [f"source.key_columns names {name}.{k}, which is not a column" for k in missing]
    problems += [f"source.key_columns names {name}.{k}, which may be NULL: a key column must be NOT NULL"
                 for k in nullable]
    if problems:
        return schema, problems
    return dataclasses.replace(schema, unique_key=tuple(by_name[k.lower()].name for k in columns)), []


def without_excluded(schema: TableSchema, source: SourceConfig) -> TableSchema:
    """``schema`` without the columns ``source.exclude_columns`` leaves out, unchecked (a schema
    from the schema history, checked when it was recorded)."""
    name = schema.qualified_name
    kept = tuple(c for c in schema.columns if not _out(c, name, source))
    return schema if len(kept) == len(schema.columns) else dataclasses.replace(schema, columns=kept)


def _out(col, table: str, source: SourceConfig) -> bool:
    return source.excludes_column(f"{table}.{col.name}")


def captured_change(change: SchemaChange, source: SourceConfig) -> SchemaChange | None:
    """A column change as it concerns the captured columns: None when it only touches excluded
    columns; a rename or CHANGE of a captured column to an excluded name is a drop of it."""
    if change.kind not in ("add_column", "drop_column", "rename_column", "alter_column_type"):
        return change
    old = change.column.name if change.kind == "add_column" else change.name
    new = (change.new_name if change.kind == "rename_column"
           else change.column.name if change.kind == "alter_column_type" else old)
    old_out = source.excludes_column(f"{change.table}.{old}")
    new_out = source.excludes_column(f"{change.table}.{new}")
    if not new_out:
        if old_out and old != new:
            # Its values until now were never read: the column stays out until a new snapshot.
            log.warning("%s: excluded column %s renamed to %s, which is not excluded: not captured (a new snapshot "
                        "of the table captures it)", change.table, old, new)
            return None
        return change
    if old_out or change.kind in ("add_column", "drop_column"):
        return None
    return dataclasses.replace(change, kind="drop_column", name=old, new_name=None, column=None, after=None)
