"""Routes: several captured source tables written into one Delta table, the sink (sharded
``shop.user_1``, ``shop.user_2``… → ``shop.user``), as Debezium's ByLogicalTableRouter does.

Rules (docs/routes.md; tests/test_routes.py):
- A captured table whose "db.table" fully matches a route's ``source`` regex is written to
  the Delta table of that route's ``sink``; the first matching route wins. Every other
  table goes to its own Delta table, exactly as without routes.
- Keys stay unique: a routed Delta table has the reserved column ``_cdc_source`` ("db.table"
  of the row's source table, never NULL), and its key is ``(_cdc_source, <primary key>)``
  (Debezium adds ``__dbz__physicalTableIdentifier`` to the key for the same reason: shards
  reuse ids). Every source of one sink must have the same primary-key column names.
- Widest schema: the sink's columns are the union of its sources' columns (the first
  source's order, columns new to it appended), each of the narrowest type that holds every
  source's values (:func:`cdc_core.types.mapping.widest_type`); a column a source lacks is NULL in
  its rows. Sources without a common type for a column are a configuration error naming
  the column and the tables, as are differing keys and a sink that is also the name of a
  captured table no route sends there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

import pyarrow as pa

from cdc_core.errors import BadInput
from cdc_core.schema.output import CDC_SOURCE, ROUTED_RESERVED_FIELDS
from cdc_core.schema.table import TableSchema
from cdc_core.types.mapping import UnsupportedType, arrow_schema, widest_type


class RouteError(BadInput, ValueError):
    """Routed tables that cannot share one Delta table (keys or column types differ)."""


class Router:
    """Which Delta table each captured source table is written to (see the module rules)."""

    def __init__(self, routes: Sequence):
        # RouteConfig-like objects (``source`` regex, ``sink`` "db.table"), in config order.
        self._routes = [(re.compile(r.source), r.source, r.sink) for r in routes]
        self._cache: dict[str, str | None] = {}

    def __bool__(self) -> bool:
        return bool(self._routes)

    def route(self, name: str) -> str | None:
        """The sink of the first route whose source regex fully matches ``name``, or None."""
        try:
            return self._cache[name]
        except KeyError:
            sink = next((s for rx, _, s in self._routes if rx.fullmatch(name)), None)
            self._cache[name] = sink
            return sink

    def routed(self, name: str) -> bool:
        """Whether ``name`` is written to a route's sink (and so carries ``_cdc_source``)."""
        return self.route(name) is not None

    def sink(self, name: str) -> str:
        """The "db.table" name of the Delta table ``name`` is written to (itself when unrouted)."""
        return self.route(name) or name

    def is_sink(self, name: str) -> bool:
        """Whether ``name`` is the sink of a configured route."""
        return any(s == name for _, _, s in self._routes)

    def sources(self, sink: str, names: Iterable[str]) -> list[str]:
        """The routed tables among ``names`` whose sink is ``sink``, in name order."""
        return sorted(n for n in names if self.route(n) == sink)

    def problems(self, schemas: Mapping[str, TableSchema]) -> list[str]:
        """Every reason the captured tables ``schemas`` cannot be routed as configured, one line each."""
        out = []
        for n in sorted(schemas):
            if self.is_sink(n) and not self.routed(n):
                out.append(f"routes: sink {n} is also a captured table that no route sends there (both would write "
                           f"the Delta table {n}); exclude it, route it too, or choose another sink name")
        for sink in sorted({self.route(n) for n in schemas} - {None}):
            members = [schemas[n] for n in self.sources(sink, schemas)]
            keys = {s.qualified_name: s.row_key for s in members}
            out += [f"routes: {n} has no primary key or NOT NULL unique key: a routed table's rows are identified "
                    f"in {sink} by ({CDC_SOURCE}, row key); name its key columns in source.key_columns"
                    for n, k in keys.items() if not k]
            if len({frozenset(k) for k in keys.values()}) > 1:
                shown = ", ".join(f"{n} ({', '.join(k) or 'no key'})" for n, k in keys.items())
                out.append(f"routes: the sources of {sink} have different row keys: {shown}; the Delta key is "
                           f"({CDC_SOURCE}, row key), so every source of one sink needs the same key columns")
            try:
                sink_schema(members, sink=sink)
            except RouteError as e:
                out.append(str(e))
            except UnsupportedType:
                pass  # reported for the table itself (binlake validate, the snapshot's reader)
        return out

    def check(self, schemas: Mapping[str, TableSchema]) -> None:
        """Raise RouteError listing :meth:`problems`, if any."""
        problems = self.problems(schemas)
        if problems:
            raise RouteError("; ".join(problems))


def sink_key(schema: TableSchema) -> tuple[str, ...]:
    """The Delta key of a routed source's rows: ``(_cdc_source, *row key)`` (TableSchema.row_key)."""
    return (CDC_SOURCE, *schema.row_key)


def sink_schema(sources: Sequence[TableSchema], base: pa.Schema | None = None, sink: str = "") -> pa.Schema:
    """The routed Delta table's schema for ``sources`` (see the module rules): the union of
    their columns at the widest types, then ``_cdc_source``, ``_cdc_op``, ``_cdc_seq``.

    With ``base`` (the Delta table's current schema) its columns keep their order and at
    least their type; columns new to it are appended. Raises RouteError when a column has
    no type holding every source's values, naming the column and the tables.
    """
    fields: dict[str, pa.Field] = {}
    origin: dict[str, list[str]] = {}  # column -> where its current type came from (for errors)
    for f in base or ():
        fields[f.name], origin[f.name] = f, [f"the Delta table {sink} ({f.type})"]
    for s in sources:
        for col, f in zip(s.columns, arrow_schema(s)):
            where = f"{s.qualified_name} ({col.column_type})"
            have = fields.get(f.name)
            if have is None:
                fields[f.name], origin[f.name] = f, [where]
                continue
            wide = widest_type(have.type, f.type)
            if wide is None:
                raise RouteError(f"routes: column {f.name!r} of {sink or 'a routed table'} is {have.type} in "
                                 f"{', '.join(origin[f.name])} but {f.type} in {where}, and no type holds both; "
                                 "make the types compatible or route these tables apart")
            if wide != have.type:
                fields[f.name] = have.with_type(wide)
            origin[f.name].append(where)
    if base is None:
        for f in ROUTED_RESERVED_FIELDS:
            fields[f.name] = f
    return pa.schema(list(fields.values()))
