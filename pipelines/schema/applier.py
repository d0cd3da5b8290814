"""Applying one schema change to a Delta table under ``pipeline.schema_change_behavior``.
The engine (inline) and the Dagster job for pending changes both reach it through
``pipelines.schema.registry.apply_pending``.

Behaviours (Flink CDC's semantics; ``lenient`` is the default):
- exception: every change but create_table raises SchemaChangeRejected;
- evolve: every change as is (drop, rename and retype rewrite the table); failure raises;
- try_evolve: as evolve, but a change Delta cannot take is recorded and skipped (for
  example a type change whose cast fails on existing values);
- lenient: added columns nullable, dropped columns kept (NULL from then on), renamed
  column = new column filled from the old one (the old one kept), retyped column
  rewritten to a type that holds every old and new value (a narrower MySQL type
  keeps Delta's wider one; a cast that fails is recorded and skipped, as in try_evolve);
- ignore: only create_table; rows are written with the columns Delta has.

Routed tables (``source=``, docs/routes.md): the shared sink only grows, since other
sources may still have a column: never dropped, renamed away or narrowed; a change
fills only the changed source's rows, and a type no column can share with the other
sources is treated as a change Delta cannot take.

Invariants (tests/test_schema_evolution.py):
- Under lenient, after any change every column MySQL has holds MySQL's value for
  every row (existing rows take a new column's DEFAULT, as in MySQL).
- Delta has no in-place drop, rename or type change here (delta-rs has no column
  mapping or type widening writer): those rewrite the table in one atomic overwrite
  commit, recorded as ``rewritten``.
- Every commit carries the stream offset of the DDL, so a restart knows the change is
  in Delta even if its history record was not written.
- Column names match case-insensitively (cdc_core/schema/output.py: ``delta_name``), as in
  MySQL: a change or a row spelling a column differently reaches Delta's column, which
  keeps its spelling (tests/test_schema_applier_names.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from cdc_core.errors import TerminalError, is_transient
from cdc_core.schema.change import SchemaChange
from cdc_core.schema.column_default import DefaultNotKnown, implicit_default
from cdc_core.schema.output import CDC_SOURCE, delta_name, is_reserved
from cdc_core.schema.table import Column
from cdc_core.types.mapping import arrow_type, widens, widest_type
from pipelines.lake.tables import CommitProperties, DeltaTable, add_columns, delta_schema, rewrite

log = logging.getLogger(__name__)


class SchemaChangeRejected(TerminalError):
    """The behaviour does not allow this change (exception) or it failed (evolve)."""


@dataclass(frozen=True)
class ApplyResult:
    """What applying a change did to Delta."""

    action: str  # human-readable: "added column x in place", "rewrote: dropped column y", "kept: ..."
    rewritten: bool = False
    skipped: bool = False


def _implicit_default(col: Column):
    """MySQL's implicit default of a NOT NULL column without DEFAULT, as binlake stores it
    (None where binlake knows none: the column's rows then need a backfill anyway)."""
    try:
        return implicit_default(col)
    except DefaultNotKnown:
        return None


def _fill(col: Column, default, n: int) -> pa.Array:
    value = default if default is not None else (None if col.nullable else _implicit_default(col))
    t = arrow_type(col)
    if value is None:
        return pa.nulls(n, t)
    return pc.cast(pa.array([value] * n), t) if not isinstance(value, (bytes, bool)) else pa.array([value] * n, t)




def _with_column(table: pa.Table, name: str, array, index: int | None = None) -> pa.Table:
    existing = delta_name(table.column_names, name)
    if existing is not None:
        return table.set_column(table.column_names.index(existing), existing, array)
    index = len(table.column_names) if index is None else index
    return table.add_column(index, name, array)


def _source_index(table: pa.Table) -> int:
    """New source columns go before the reserved _cdc_ columns."""
    names = table.column_names
    return next((i for i, n in enumerate(names) if is_reserved(n)), len(names))


def apply_schema_change(dt: DeltaTable, change: SchemaChange, behavior: str, props: CommitProperties,
                        source: str | None = None) -> ApplyResult:
    """Apply a column change of a captured table to its Delta table (see the module doc).
    create/truncate/drop/rename of tables are handled by the engine. ``source``: the table
    is routed and ``dt`` is its route's shared sink (see :func:`_apply_routed`)."""
    kind = change.kind
    if behavior == "exception":
        raise SchemaChangeRejected(f"schema_change_behavior is exception: {change.describe()}")
    if behavior == "ignore":
        return ApplyResult(f"ignored: {change.describe()}", skipped=True)
    current = delta_schema(dt)
    try:
        if source is not None:
            return _apply_routed(dt, change, current, props, source)
        if kind == "add_column":
            return _add_column(dt, change, current, props)
        if kind == "drop_column":
            name = delta_name(current.names, change.name)
            if behavior == "lenient" or name is None:
                return ApplyResult(f"kept column {change.name} (NULL from now on)", skipped=True)
            rewrite(dt, lambda t: t.drop_columns([name]), props)
            return ApplyResult(f"rewrote: dropped column {name}", rewritten=True)
        if kind == "rename_column":
            return _rename_column(dt, change, behavior, current, props)
        if kind == "alter_column_type":
            return _alter_type(dt, change, behavior, current, props)
    except SchemaChangeRejected:
        raise
    except Exception as e:  # noqa: BLE001 - try_evolve records what Delta could not take
        if is_transient(e):
            raise  # a fault that passes (I/O, the object store): retried, never recorded as skipped
        if behavior in ("try_evolve", "lenient"):
            log.warning("schema change not applied (%s): %s: %s", behavior, change.describe(), e)
            return ApplyResult(f"not applied: {type(e).__name__}: {e}", skipped=True)
        raise SchemaChangeRejected(f"applying {change.describe()} failed: {type(e).__name__}: {e}") from e
    return ApplyResult(f"nothing to do for {kind}", skipped=True)


def _add_column(dt: DeltaTable, change: SchemaChange, current: pa.Schema, props: CommitProperties) -> ApplyResult:
    col = change.column
    if delta_name(current.names, col.name) is not None:
        return ApplyResult(f"column {col.name} already in Delta", skipped=True)
    fill = _fill(col, change.default, 0)
    if change.default is None and col.nullable:
        add_columns(dt, [pa.field(col.name, fill.type, nullable=True)], props)
        return ApplyResult(f"added column {col.name} in place")
    rewrite(dt, lambda t: _with_column(t, col.name, _fill(col, change.default, t.num_rows), _source_index(t)), props)
    return ApplyResult(f"rewrote: added column {col.name} with existing rows at its default", rewritten=True)


def _rename_column(dt: DeltaTable, change: SchemaChange, behavior: str, current: pa.Schema,
                   props: CommitProperties) -> ApplyResult:
    old, new = delta_name(current.names, change.name), change.new_name
    if old is None or delta_name(current.names, new) is not None:  # a rename in case only: Delta keeps its spelling
        return ApplyResult(f"rename {change.name} → {new}: nothing to do in Delta", skipped=True)
    if behavior == "lenient":
        rewrite(dt, lambda t: _with_column(t, new, t.column(old), _source_index(t)), props)
        return ApplyResult(f"rewrote: added column {new} filled from {old}, kept {old}", rewritten=True)
    rewrite(dt, lambda t: t.rename_columns([new if n == old else n for n in t.column_names]), props)
    return ApplyResult(f"rewrote: renamed column {old} to {new}", rewritten=True)


def _alter_type(dt: DeltaTable, change: SchemaChange, behavior: str, current: pa.Schema,
                props: CommitProperties) -> ApplyResult:
    old, col = delta_name(current.names, change.name), change.column
    if old is None:
        return ApplyResult(f"column {change.name} not in Delta", skipped=True)
    results = []
    if col.name.lower() != old.lower():  # CHANGE old new TYPE: a rename first
        results.append(_rename_column(dt, SchemaChange("rename_column", change.table, name=old, new_name=col.name),
                                      behavior, current, props))
        current = delta_schema(dt)
    name = delta_name(current.names, col.name)
    have, want = current.field(name).type, arrow_type(col)
    if have == want:
        return results[0] if results else ApplyResult(f"type of {name} unchanged in Delta", skipped=True)
    if behavior == "lenient" and widens(want, have):
        return ApplyResult(f"kept {name} as {have} (holds every {col.column_type} value)", skipped=True)
    rewrite(dt, lambda t: _with_column(t, name, pc.cast(t.column(name), want)), props)
    return ApplyResult(f"rewrote: {name} {have} → {want}", rewritten=True)


# --- routed tables (cdc_core/routes.py) ------------------------------------------------------


def widen_to(dt: DeltaTable, target: pa.Schema, props: CommitProperties | None = None) -> str | None:
    """Evolve ``dt`` to ``target``, a widening of its schema (cdc_core.routes.sink_schema):
    new columns are added in place (nullable); a wider type rewrites the table (delta-rs
    cannot widen in place). Returns what was done, or None when ``dt`` already matches."""
    current = delta_schema(dt)
    new = [f.with_nullable(True) for f in target if delta_name(current.names, f.name) is None]
    retyped = [f.with_name(name) for f in target if (name := delta_name(current.names, f.name)) is not None
               and current.field(name).type != f.type]
    if retyped:
        def transform(t: pa.Table) -> pa.Table:
            for f in retyped:
                t = _with_column(t, f.name, pc.cast(t.column(f.name), f.type))
            for f in new:
                t = _with_column(t, f.name, pa.nulls(t.num_rows, f.type), _source_index(t))
            return t

        rewrite(dt, transform, props)
        return f"rewrote: widened {', '.join(f'{f.name} to {f.type}' for f in retyped)}" + (
            f", added {', '.join(f.name for f in new)}" if new else "")
    if new:
        add_columns(dt, new, props)
        return f"added columns {', '.join(f.name for f in new)} in place"
    return None


def _apply_routed(dt: DeltaTable, change: SchemaChange, current: pa.Schema, props: CommitProperties,
                  source: str) -> ApplyResult:
    """A column change of one source of a routed table. The shared table only ever grows:
    other sources may still have a column this one drops, renames or narrows, so columns
    are never dropped, renamed away or narrowed (under every behaviour that applies
    changes); a change only fills ``source``'s own rows. A type no column can share with
    the other sources raises ValueError (skipped under lenient/try_evolve, fatal under
    evolve, by :func:`apply_schema_change`)."""
    kind = change.kind
    if kind == "add_column":
        col = change.column
        value = change.default if change.default is not None else (None if col.nullable else _implicit_default(col))
        wide = _shared_type(current, col.name, arrow_type(col), source)
        name = delta_name(current.names, col.name)
        if value is None and name is None:
            add_columns(dt, [pa.field(col.name, wide, nullable=True)], props)
            return ApplyResult(f"added column {col.name} in place (NULL in other sources' rows)")
        if value is None and current.field(name).type == wide:
            return ApplyResult(f"column {col.name} already in the routed table", skipped=True)
        rewrite(dt, lambda t: _fill_source(t, col.name, wide, source,
                                            None if value is None else _fill(col, value, t.num_rows)), props)
        return ApplyResult(f"rewrote: column {col.name} ({wide})" + (
            f" with {source}'s existing rows at its default" if value is not None else ""), rewritten=True)
    if kind == "drop_column":
        return ApplyResult(f"kept column {change.name} (a routed table keeps every source's columns; NULL in "
                           f"{source}'s rows written from now on)", skipped=True)
    if kind == "rename_column":
        return _rename_routed(dt, change.name, change.new_name, current, props, source)
    if kind == "alter_column_type":
        old, col = delta_name(current.names, change.name), change.column
        if old is None:
            return ApplyResult(f"column {change.name} not in Delta", skipped=True)
        renamed = None
        if col.name.lower() != old.lower():  # CHANGE old new TYPE: the rename first
            renamed = _rename_routed(dt, old, col.name, current, props, source)
            current = delta_schema(dt)
        name = delta_name(current.names, col.name)
        have = current.field(name).type
        wide = _shared_type(current, name, arrow_type(col), source)
        if wide == have:
            return renamed or ApplyResult(f"kept {name} as {have} (holds every {col.column_type} value and the "
                                          "other sources' values)", skipped=True)
        rewrite(dt, lambda t: _with_column(t, name, pc.cast(t.column(name), wide)), props)
        return ApplyResult(f"rewrote: {name} {have} → {wide}", rewritten=True)
    return ApplyResult(f"nothing to do for {kind}", skipped=True)


def _shared_type(current: pa.Schema, name: str, want: pa.DataType, source: str) -> pa.DataType:
    """The type column ``name`` needs in the routed table to also hold ``want``."""
    existing = delta_name(current.names, name)
    if existing is None:
        return want
    have = current.field(existing).type
    wide = widest_type(have, want)
    if wide is None:
        raise ValueError(f"column {name} is {have} in the routed table, which cannot also hold {source}'s {want}")
    return wide


def _fill_source(t: pa.Table, name: str, wide: pa.DataType, source: str, values: pa.Array | None) -> pa.Table:
    """Column ``name`` cast to ``wide`` (NULL where absent), with ``values`` in ``source``'s rows."""
    existing = delta_name(t.column_names, name)
    column = pc.cast(t.column(existing), wide) if existing is not None else pa.nulls(t.num_rows, wide)
    if values is not None:
        column = pc.if_else(pc.equal(t.column(CDC_SOURCE), source), pc.cast(values, wide), column)
    return _with_column(t, name, column, None if existing is not None else _source_index(t))


def _rename_routed(dt: DeltaTable, old: str, new: str, current: pa.Schema, props: CommitProperties,
                   source: str) -> ApplyResult:
    existing = delta_name(current.names, old)
    if existing is None or old.lower() == new.lower():
        return ApplyResult(f"rename {old} → {new}: nothing to do in Delta", skipped=True)
    old = existing
    wide = _shared_type(current, new, current.field(old).type, source)
    rewrite(dt, lambda t: _fill_source(t, new, wide, source, t.column(old)), props)
    return ApplyResult(f"rewrote: column {new} filled from {old} in {source}'s rows; kept {old} (other sources "
                       "may have it)", rewritten=True)
