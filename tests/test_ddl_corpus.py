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
import re

import pyarrow as pa
import pymysql
import pytest
from deltalake import DeltaTable

from cdc_core.schema.change import SchemaChange, UnparsedDDL, evolve_schema, parse_ddl
from cdc_core.schema.output import output_schema
from cdc_core.schema.table import Column, TableSchema, describe_table, list_tables, quote_ident
from cdc_core.source.connection import connect, connection_settings
from cdc_core.types.mapping import UnsupportedType, arrow_type
from pipelines.lake.control_store import ControlStore
from pipelines.lake.tables import table_uri
from pipelines.reconcile.rows import canonical_value
from pipelines.stream import StreamEngine
from tests.ddl_corpus import GROUPS, Group
from tests.helpers import assert_equal

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
    existed = {c.table for c in changes if c.kind == "create_table" and _describe(cur, c.table) is not None}
    cur.execute(sql)
    problems = []
    if unknown and (error is None or unknown.lower() not in error.why.lower()):
        problems.append(f"should be unparsed for '{unknown}', got {error or changes}")
    if not unknown and error is not None:
        problems.append(str(error))
    schema = before
    for c in changes:
        if c.kind in _TABLE_KINDS:
            problems += _check_table_change(cur, c, c.table in existed)
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


def _check_table_change(cur, c: SchemaChange, existed: bool) -> list[str]:
    if c.kind == "create_table":
        server = _describe(cur, c.table)
        if server is None:
            return [f"{c.table} was not created"]
        if existed and c.conditional:
            return []  # IF NOT EXISTS on a table that is there: nothing happens
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


# --- the stream engine over the whole corpus ----------------------------------------------


def _columns(changes: list[SchemaChange]) -> list[Column]:
    return [c.column for c in changes if c.column is not None] + [
        col for c in changes if c.schema is not None for col in c.schema.columns]


def _streamable(sql: str, db: str) -> bool:
    """Whether every column the statement defines has an Arrow type (types binlake does not
    map yet stop the stream under ``evolve``; they are left out of the stream run)."""
    try:
        changes = parse_ddl(sql, db)
    except UnparsedDDL as e:
        changes = list(e.changes)
    return all(_arrow(c) is not None for c in _columns(changes))


# What a write of _exercise may meet, by the server's error number: a table without an id column,
# a key value the table holds already, a row (the implicit defaults) a CHECK constraint of the
# corpus refuses.
NO_ID_COLUMN, DUPLICATE_KEY, CHECK_FAILED = 1054, 1062, 4025


def _exercise(cur, db: str, tables: list[str]) -> list[str]:
    """Writes after the statements (non-strict: columns without a default take the implicit one)
    to each of ``tables`` that still exists (a group's statements may rename or drop its table).
    Returns what the server refused that it should not have: any error but an unknown ``id`` in a
    table without one, a duplicate key, or a CHECK constraint's refusal."""
    cur.execute("SET SESSION sql_mode = ''")
    unexpected = []
    for t in tables:
        cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                    (db, t))
        if cur.fetchone()[0] == 0:
            continue
        cur.execute("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
                    "AND COLUMN_NAME = 'id'", (db, t))
        has_id = cur.fetchone()[0] == 1
        for stmt in ("INSERT INTO {t} (id) VALUES (3)", "DELETE FROM {t} WHERE id = 2",
                     "UPDATE {t} SET id = 4 WHERE id = 1", "INSERT INTO {t} () VALUES ()"):
            sql = stmt.format(t=quote_ident(t))
            try:
                cur.execute(sql)
            except pymysql.MySQLError as e:
                code = e.args[0]
                if not (code == NO_ID_COLUMN and not has_id or code in (DUPLICATE_KEY, CHECK_FAILED)):
                    unexpected.append(f"{sql}: {e}")
    cur.execute("SET SESSION sql_mode = DEFAULT")
    return unexpected


def _same_schema(cfg, cur, name: str) -> list[str]:
    server = {f.name.lower(): f.type for f in output_schema(describe_table(cur, *name.split(".", 1)))}
    delta = {f.name.lower(): f.type for f in DeltaTable(table_uri(cfg.sink.path, name)).schema().to_arrow()}
    return [] if server == delta else [f"{name}: Delta {delta} != server {server}"]


def test_the_stream_follows_the_corpus(db, make_config):
    name, conn = db
    cfg = make_config(name, pipeline={"schema_change_behavior": "evolve"}, source={"startup": {"mode": "latest"}})
    with conn.cursor() as cur:
        for g in GROUPS:
            cur.execute(_sql(g.base, name, g))
    StreamEngine(cfg, until_now=True).run()  # the Delta tables exist, the stream starts at the binlog end
    expect_unparsed, compared, refused = set(), [], []
    with conn.cursor() as cur:
        for g in GROUPS:
            for row in g.rows:
                cur.execute(_sql(row, name, g))
            created = []
            for case in g.cases:
                sql = _sql(case.sql, name, g)
                if not _streamable(sql, name):
                    continue
                cur.execute(sql)
                if case.unknown and "SELECT" in sql:
                    created.append(f"{name}.{_table(g)}_p")  # the server logs CREATE … SELECT as a CREATE TABLE
                elif case.unknown:
                    with pytest.raises(UnparsedDDL) as e:
                        parse_ddl(sql, name)
                    expect_unparsed.add((e.value.tables[0], sql))
                elif sql.upper().startswith("CREATE TABLE"):
                    created += [c.table for c in parse_ddl(sql, name)]
            if g.knowable:
                compared.append(f"{name}.{_table(g)}")
            refused += _exercise(cur, name, [_table(g)] + [n.split(".", 1)[1] for n in created])
            compared += [n for n in created if (s := _describe(cur, n)) is not None and s.primary_key]
        assert not refused, "the server refused writes it should take:\n" + "\n".join(refused)
        keyless = [n for n in list_tables(cur) if n.startswith(f"{name}.") and not describe_table(
            cur, *n.split(".", 1)).row_key]
    # Tables without a primary key are not streamed (the stream refuses to start with one captured).
    cfg = make_config(name, pipeline={"schema_change_behavior": "evolve"}, source={
        "startup": {"mode": "latest"}, "exclude_tables": [re.escape(n) for n in keyless]})
    StreamEngine(cfg, until_now=True).run()
    history = ControlStore.of(cfg).schema_history()
    unparsed = {(r.table, r.ddl) for r in history if r.status == "unparsed"}
    assert expect_unparsed - unparsed == set(), "statements binlake cannot know were not recorded as unparsed"
    with connect(connection_settings(cfg)) as c, c.cursor() as cur:
        problems = [p for n in compared for p in _same_schema(cfg, cur, n)]
    assert not problems, "\n".join(problems)
    assert_equal(cfg, compared)
