"""Rows shaped as a Delta table before they are written to it: the source's columns matched
to Delta's by name, cast to Delta's types; a routed source's rows with ``_cdc_source``.

Invariants (tests/test_schema_applier_names.py, tests/test_schema_evolution.py):
- Columns match by name case-insensitively (the rule of cdc_core/schema/output.py: ``delta_name``), never
  by position; a column Delta has and the rows lack is NULL.
- A value Delta's type cannot hold (only under ignore/try_evolve/lenient, where Delta kept
  an older type) is NULL alone, logged with the table and column; the rest of its column is
  cast unchanged. Row keys are logged at DEBUG only: they are row values.
"""

from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.compute as pc

from cdc_core.schema.output import SOURCE_FIELD

log = logging.getLogger(__name__)


def conform(table: pa.Table, target: pa.Schema, source: str = "", key: tuple[str, ...] = ()) -> pa.Table:
    """Rows in the source's columns, shaped as the Delta table: columns matched by name
    (case-insensitively), cast to Delta's type, missing ones NULL. A value Delta's type
    cannot hold (only under ignore/try_evolve/lenient, where Delta kept an older type) is
    NULL alone, logged with the table and column (the keys at DEBUG: they are row values)."""
    if table.schema == target:  # the usual case: no schema change since the table was created
        return table
    by_name = {n.lower(): n for n in table.column_names}
    arrays = []
    for f in target:
        name = by_name.get(f.name.lower())
        if name is None:
            arrays.append(pa.nulls(table.num_rows, f.type))
            continue
        a = table.column(name)
        if a.type != f.type:
            a = _cast_each(table, a, f, source, key)
        arrays.append(a)
    return pa.Table.from_arrays(arrays, schema=target)


def _cast_each(table: pa.Table, a: pa.ChunkedArray, f: pa.Field, source: str, key: tuple[str, ...]) -> pa.Array:
    """``a`` cast to ``f``'s type; values that do not fit become NULL (see :func:`conform`)."""
    try:
        return pc.cast(a, f.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    values, bad = [], []
    for i, v in enumerate(a.to_pylist()):
        try:
            values.append(pc.cast(pa.array([v], a.type), f.type)[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            values.append(None)
            bad.append(i)
    log.warning("%s column %s: %d value(s) do not fit Delta's %s; written as NULL", source or "table", f.name,
                len(bad), f.type)
    if key and log.isEnabledFor(logging.DEBUG):
        keys = [tuple(table.column(k)[i].as_py() for k in key if k in table.column_names) for i in bad]
        log.debug("%s column %s: keys of the values written as NULL: %s", source, f.name, keys)
    return pa.array(values, f.type)


def conform_routed(table: pa.Table, source: str, target: pa.Schema) -> pa.Table:
    """Rows of the routed table ``source`` shaped as its sink: ``_cdc_source`` filled, then
    :func:`conform` (columns the source lacks are NULL, narrower types cast up)."""
    return conform(table.append_column(SOURCE_FIELD, pa.repeat(pa.scalar(source, pa.string()), table.num_rows)),
                   target, source)
