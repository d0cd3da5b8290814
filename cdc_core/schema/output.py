"""The row layout of the Delta tables binlake writes (docs/contracts.md, "Delta tables"):
the source table's columns (types: cdc_core/types/mapping.py), then the reserved columns,
whose names all start with ``_cdc_``:

- ``_cdc_source`` (a route's sink only, cdc_core/routes.py): "db.table" of the row's source
  table, never NULL, part of the sink's key;
- ``_cdc_op``: ``r`` a snapshot read, ``c``/``u`` an insert/update the stream applied or a
  chunk folded in (``d`` marks a deletion in a batch and never stays in a table);
- ``_cdc_seq``: the change's binlog order (cdc_core/offset/position.py: ``seq``);
- then the columns of the table's mode and metadata (cdc_core/schema/modes.py), when configured.

A table is created with the source columns in the source's order, then the reserved ones
in the order above (:func:`output_schema`; a route's sink: cdc_core.routes.sink_schema);
the schema applier adds a later source column before the reserved ones.

Invariant: column names match case-insensitively, as in MySQL (:func:`delta_name`): a
column keeps the spelling Delta created it with (tests/test_schema_applier_names.py).
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from cdc_core.schema.modes import MODE_COLUMNS
from cdc_core.schema.table import TableSchema
from cdc_core.types.mapping import arrow_schema

RESERVED_PREFIX = "_cdc_"
CDC_OP, CDC_SEQ, CDC_SOURCE = "_cdc_op", "_cdc_seq", "_cdc_source"
SOURCE_FIELD = pa.field(CDC_SOURCE, pa.string(), nullable=False)
# The reserved columns of every table, and of a route's sink, in their order.
RESERVED_FIELDS = (pa.field(CDC_OP, pa.string()), pa.field(CDC_SEQ, pa.int64()))
ROUTED_RESERVED_FIELDS = (SOURCE_FIELD, *RESERVED_FIELDS)


def output_schema(schema: TableSchema, extras: Iterable[pa.Field] = ()) -> pa.Schema:
    """Arrow schema of a Delta table: source columns then the reserved _cdc_ columns, then
    ``extras`` (the mode's and metadata columns, cdc_core/schema/modes.py: SinkColumns.fields)."""
    base = arrow_schema(schema)
    for f in (*RESERVED_FIELDS, *extras):
        base = base.append(f)
    return base


def is_reserved(name: str) -> bool:
    """Whether ``name`` is one of binlake's reserved columns (not a source column)."""
    return name.startswith(RESERVED_PREFIX) or name in MODE_COLUMNS


def delta_name(names: Iterable[str], name: str) -> str | None:
    """Delta's spelling of source column ``name``, or None when Delta has no such column.
    Column names are case-insensitive in MySQL (``MODIFY DESC3`` changes column ``desc3``)
    and in Delta, so every lookup goes through this: a Delta column keeps the spelling it
    was created with."""
    key = name.lower()
    return next((n for n in names if n.lower() == key), None)
