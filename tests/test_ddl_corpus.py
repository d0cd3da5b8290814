"""The DDL corpus (tests/ddl_corpus.py) against the real server.

- Every statement runs on MariaDB; binlake's view of it (``evolve_schema`` over the
  schema before it with ``parse_ddl``'s changes) must equal ``describe_table`` after it:
  column names, order, types (the information_schema fields and the mapped Arrow type),
  nullability, primary key; an added column's value in the rows that existed equals the
  server's; a statement whose effect binlake cannot know raises ``UnparsedDDL`` with the
  reason the corpus names.
- The stream engine (startup ``latest``, behaviour ``evolve``) follows the whole corpus:
  each Delta table's schema is the server's (``output_schema``) and its rows are MySQL's;
  every statement binlake cannot know is in the schema history as ``unparsed``.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

from cdc_core.schema_change import SchemaChange, UnparsedDDL, evolve_schema, parse_ddl
from cdc_core.table_schema import Column, TableSchema, describe_table, quote_ident
from cdc_core.types import UnsupportedType, arrow_type
from pipelines.reconcile import canonical_value
from tests.ddl_corpus import GROUPS, Group

_TABLE_KINDS = ("create_table", "rename_table", "drop_table", "truncate_table")


def _table(group: Group) -> str:
    return f"g_{group.name}"


def _sql(text: str, db: str, group: Group) -> str:
    return text.format(t=_table(group), db=db)


def _describe(cur, qualified: str) -> TableSchema | None:
    try:
        return describe_table(cur, *qualified.split(".", 1))
    except LookupError:
        return None


def _arrow(col: Column) -> pa.DataType | None:
    try:
        return arrow_type(col)
    except UnsupportedType:
        return None


def _shape(col: Column) -> Column:
    """What binlake must know of a column. MariaDB describes JSON as longtext; the collation
    follows table and database defaults the statement does not repeat."""
    if col.data_type == "json":
        col = dataclasses.replace(col, data_type="longtext", column_type="longtext", char_length=4294967295)
    return dataclasses.replace(col, collation=None)


def schema_diff(mine: TableSchema, server: TableSchema) -> list[str]:
    """How binlake's schema differs from the server's (empty when equal)."""
    out = []
    if [c.name for c in mine.columns] != [c.name for c in server.columns]:
        out.append(f"columns {[c.name for c in mine.columns]} != server {[c.name for c in server.columns]}")
    for a, b in zip(mine.columns, server.columns):
        if _shape(a) != _shape(b) or _arrow(a) != _arrow(b):
            out.append(f"column {a.name}: {_shape(a)} != server {_shape(b)}")
    if mine.primary_key != server.primary_key:
        out.append(f"primary key {mine.primary_key} != server {server.primary_key}")
    return out


def _same_value(col: Column, mine, server) -> bool:
    t = _arrow(col)
    if t is None:
        return mine == server
    return pa.scalar(mine, t) == pa.scalar(server, t)


def _check_values(cur, schema: TableSchema, change: SchemaChange) -> list[str]:
    """The value binlake gives existing rows in an added column against the server's."""
    col = next(c for c in schema.columns if c.name.lower() == change.column.name.lower())
    cur.execute(f"SELECT {quote_ident(col.name)} FROM {quote_ident(schema.database)}.{quote_ident(schema.table)}")
    values = {canonical_value(col, r[0]) for r in cur.fetchall()}
    bad = [v for v in values if not _same_value(col, change.default, v)]
    return [f"column {col.name}: existing rows have {v!r}, binlake says {change.default!r}" for v in bad]


def _check_case(cur, db: str, group: Group, sql: str, unknown: str) -> list[str]:
    """Run one statement; what binlake got wrong about it."""
    table = f"{db}.{_table(group)}"
    before = _describe(cur, table)
    try:
        changes, error = parse_ddl(sql, db), None
    except UnparsedDDL as e:
        changes, error = list(e.changes), e
    cur.execute(sql)
    problems = []
    if unknown and (error is None or unknown.lower() not in error.why.lower()):
        problems.append(f"should be unparsed for '{unknown}', got {error or changes}")
    if not unknown and error is not None:
        problems.append(str(error))
    schema = before
    for c in changes:
        if c.kind in _TABLE_KINDS:
            problems += _check_table_change(cur, c)
        elif c.table == table:
            try:
                schema = evolve_schema(schema, c)
            except UnparsedDDL as e:
                problems.append(f"evolve_schema: {e}")
    after = _describe(cur, table)
    if after is not None and before is not None and (error is None or error.changes):
        problems += schema_diff(schema, after)
        added = [c for c in changes if c.kind == "add_column" and c.table == table and
                 not any(x.name.lower() == c.column.name.lower() for x in before.columns)]
        if error is None:
            for c in added:
                problems += _check_values(cur, after, c)
    return [f"{sql}\n    {p}" for p in problems]


def _check_table_change(cur, c: SchemaChange) -> list[str]:
    if c.kind == "create_table":
        server = _describe(cur, c.table)
        if server is None:
            return [] if c.conditional else [f"{c.table} was not created"]
        mine = c.schema or _describe(cur, c.like).renamed(c.table)
        return schema_diff(mine, server)
    if c.kind == "rename_table":
        return [] if _describe(cur, c.table) is None else [f"{c.table} is still there"]
    if c.kind == "drop_table":
        return [] if _describe(cur, c.table) is None else [f"{c.table} was not dropped"]
    cur.execute(f"SELECT COUNT(*) FROM {'.'.join(quote_ident(p) for p in c.table.split('.', 1))}")
    return [] if cur.fetchone()[0] == 0 else [f"{c.table} was not truncated"]


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: g.name)
def test_binlake_follows_the_server(db, group):
    name, conn = db
    problems = []
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(_sql(group.base, name, group))
        for row in group.rows:
            cur.execute(_sql(row, name, group))
        for case in group.cases:
            problems += _check_case(cur, name, group, _sql(case.sql, name, group), case.unknown)
    assert not problems, "\n".join(problems)
