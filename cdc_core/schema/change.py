"""Typed schema-change events parsed from binlog DDL (CREATE/ALTER/DROP/RENAME/TRUNCATE
TABLE, as the MariaDB and MySQL manuals give their grammar), and their effect on a source
table's schema.

Invariants (tests/test_ddl_parse.py; tests/test_ddl_corpus.py checks them against the server):
- ``parse_ddl`` returns one statement's changes in an order in which applying them one by
  one gives what the server built: drops, then in-place changes and renames (a rename
  chain ``a→b, b→c`` reordered so no name is taken twice), then added columns and changes
  with FIRST/AFTER in statement order (AFTER names a column of the new table), then
  primary-key changes, then a table rename. Unqualified tables are in the QueryEvent's
  schema. The same statement always gives the same list (pending changes are found again
  by their index).
- Statements that change no column (indexes, constraints, table options, partitioning
  that moves no row, ALTER COLUMN … SET/DROP DEFAULT, CREATE DATABASE, views) give no
  events; temporary tables are not table statements (cdc_core/schema/statements.py).
- Nothing is skipped silently: a statement on a table that cannot be read, or whose effect
  on the rows cannot be known from its text (CREATE TABLE … SELECT, an added column whose
  existing rows take a value the server computes, partition operations that move rows
  without row events, system versioning, renames that swap names), raises ``UnparsedDDL``
  naming the tables, the reason and the statement; when only the values of existing rows
  are unknown, ``UnparsedDDL.changes`` still gives the schema changes.
- ``evolve_schema(schema, change)`` is the source table's schema right after the change:
  columns in the server's order (FIRST/AFTER honoured), names matched case-insensitively
  (a column keeps the spelling its definition gives: MODIFY/CHANGE/RENAME spell it anew),
  primary-key columns NOT NULL. It returns a schema or raises ``UnparsedDDL`` saying what
  does not match (a column that is not there, or already is, without IF [NOT] EXISTS).
  ``evolve_all`` does the same for a whole statement over several tables (the stream
  records a statement that does not fit the schemas it has as ``unparsed``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from cdc_core.schema.column_def import ColumnDef, column_from_def, parse_column_def
from cdc_core.schema.column_default import DefaultNotKnown, existing_rows_value
from cdc_core.schema.sql_lexer import WORD, Cursor, SQLSyntaxError, split_top_level
from cdc_core.schema.statements import Statement, parse_statement, qualified
from cdc_core.schema.table import Column, TableSchema

__all__ = ["SchemaChange", "UnparsedDDL", "column_from_def", "evolve_all", "evolve_schema", "parse_ddl"]

_TABLE_OPTIONS = {
    "ENGINE", "TYPE", "AUTO_INCREMENT", "AVG_ROW_LENGTH", "CHECKSUM", "TABLE_CHECKSUM", "PAGE_CHECKSUM", "COMMENT",
    "CONNECTION", "DELAY_KEY_WRITE", "ENCRYPTED", "ENCRYPTION_KEY_ID", "ENCRYPTION", "IETF_QUOTES", "INSERT_METHOD",
    "KEY_BLOCK_SIZE", "MAX_ROWS", "MIN_ROWS", "PACK_KEYS", "PAGE_COMPRESSED", "PAGE_COMPRESSION_LEVEL", "PASSWORD",
    "ROW_FORMAT", "SEQUENCE", "STATS_AUTO_RECALC", "STATS_PERSISTENT", "STATS_SAMPLE_PAGES", "TABLESPACE",
    "TRANSACTIONAL", "UNION", "COMPRESSION", "AUTOEXTEND_SIZE", "SECONDARY_ENGINE", "ENGINE_ATTRIBUTE",
    "SECONDARY_ENGINE_ATTRIBUTE", "STORAGE", "CHARSET", "COLLATE", "ALGORITHM", "LOCK",
}
_INDEX_WORDS = {"INDEX", "KEY", "FULLTEXT", "SPATIAL", "UNIQUE", "FOREIGN", "CHECK"}
# Partition maintenance that keeps every row where it was as far as the table is concerned.
_PARTITION_KEEPS_ROWS = {"ANALYZE", "CHECK", "OPTIMIZE", "REBUILD", "REPAIR", "COALESCE", "REORGANIZE"}
_PARTITION_MOVES_ROWS = {"TRUNCATE": "TRUNCATE PARTITION deletes rows", "EXCHANGE": "EXCHANGE PARTITION swaps rows "
                         "with another table", "IMPORT": "IMPORT … TABLESPACE replaces rows"}
_DROP_PARTITION = "DROP PARTITION deletes rows"
_CONVERT_PARTITION = "CONVERT PARTITION/TABLE moves rows between tables"
# What changes rows without writing them to the binlog: the tables it names need a backfill.
ROWS_CHANGED_UNSEEN = frozenset({*_PARTITION_MOVES_ROWS.values(), _DROP_PARTITION, _CONVERT_PARTITION})


class UnparsedDDL(ValueError):
    """A DDL statement on a captured table whose effect binlake cannot know from its text."""

    def __init__(self, sql: str, why: str, tables: tuple[str, ...] = (), changes: tuple[SchemaChange, ...] = (),
                 rows_changed: bool = False):
        super().__init__(f"DDL on {', '.join(tables) or 'an unnamed table'} not understood ({why}): {sql}")
        self.sql = sql
        self.why = why
        self.tables = tables  # "db.table" names it touches, where they could be read
        self.changes = changes  # the schema changes, when only the values existing rows take are unknown
        self.rows_changed = rows_changed  # rows of ``tables`` changed, none in the binlog (partition maintenance)


@dataclass(frozen=True)
class SchemaChange:
    """One schema change on ``table`` ("db.table").

    kind: create_table | add_column | drop_column | rename_column | alter_column_type |
    alter_primary_key | truncate_table | drop_table | rename_table.
    """

    kind: str
    table: str
    column: Column | None = None  # added / retyped column (its new definition)
    default: object = None  # add_column: the value existing rows take, canonical (None: NULL)
    name: str | None = None  # dropped / renamed / retyped column's current name
    new_name: str | None = None  # rename_column: new column name; rename_table: new "db.table"
    after: str | None = None  # add/alter with AFTER col; "" for FIRST; None: at the end / in place
    schema: TableSchema | None = None  # create_table: the new table
    like: str | None = None  # create_table ... LIKE "db.table"
    primary_key: tuple[str, ...] = ()  # alter_primary_key: the new key (empty: dropped)
    conditional: bool = False  # IF [NOT] EXISTS: nothing to do when the column (table) is missing (there)
    sql: str = field(default="", compare=False, repr=False)  # the statement

    def describe(self) -> str:
        """A short human description for logs, status and history."""
        what = {"add_column": f"add column {self.column.name if self.column else ''} {self._type()}",
                "drop_column": f"drop column {self.name}",
                "rename_column": f"rename column {self.name} to {self.new_name}",
                "alter_column_type": f"change column {self.name} to {self.column.name if self.column else ''} "
                                     f"{self._type()}",
                "alter_primary_key": f"primary key ({', '.join(self.primary_key)})" if self.primary_key
                else "drop primary key",
                "rename_table": f"rename to {self.new_name}"}.get(self.kind, self.kind.replace("_", " "))
        return f"{self.table}: {what}".strip()

    def _type(self) -> str:
        return self.column.column_type if self.column else ""


def parse_ddl(sql: str, default_db: str) -> list[SchemaChange]:
    """The schema changes of one DDL statement (see the module invariants)."""
    stmt = parse_statement(sql, default_db)
    if stmt.kind == "rename":
        names = stmt.tables
        return [SchemaChange("rename_table", a, new_name=b, sql=sql) for a, b in zip(names[::2], names[1::2])]
    if stmt.kind == "truncate":
        return [SchemaChange("truncate_table", t, sql=sql) for t in stmt.tables]
    if stmt.kind == "drop":
        return [SchemaChange("drop_table", t, sql=sql) for t in stmt.tables]
    if stmt.kind == "unparsed":
        raise UnparsedDDL(sql, stmt.error, stmt.tables)
    if stmt.kind not in ("create", "alter"):
        return []
    unknown: list[str] = []  # why the rows after the statement cannot be known
    try:
        if stmt.kind == "create":
            changes = [_create(stmt, default_db, unknown)]
        else:
            changes = _order(_alter(stmt, default_db, unknown))
    except (SQLSyntaxError, ValueError) as e:
        raise UnparsedDDL(sql, str(e), stmt.tables) from None
    if unknown:
        moved = any(u in ROWS_CHANGED_UNSEEN for u in unknown)
        tables = stmt.tables + (_other_tables(stmt, default_db) if moved else ())
        raise UnparsedDDL(sql, "; ".join(unknown), tables, tuple(changes), rows_changed=moved)
    return changes


# --- CREATE TABLE -------------------------------------------------------------------------


def _create(stmt: Statement, default_db: str, unknown: list[str]) -> SchemaChange:
    name = stmt.tables[0]
    cur = Cursor(list(stmt.body), stmt.sql)
    if cur.accept("LIKE") or cur.accept("(", "LIKE"):
        src = qualified(*cur.qualified_name(), default_db)
        return SchemaChange("create_table", name, like=src, conditional=stmt.conditional, sql=stmt.sql)
    if not cur.at("("):
        raise SQLSyntaxError("CREATE TABLE … SELECT without a column list: its columns come from the query")
    definitions = cur.skip_group()
    trailing = cur.tokens[cur.i:]
    if any(t.upper == "SELECT" for t in trailing):
        raise SQLSyntaxError("CREATE TABLE … SELECT: the query may add columns the statement does not list")
    if _has(trailing, "WITH", "SYSTEM", "VERSIONING"):
        unknown.append("a system-versioned table (history rows, hidden columns)")
    columns: list[Column] = []
    pk: list[str] = []
    uniques: list[list[str]] = []  # in definition order
    for part in split_top_level(definitions):
        item = Cursor(part, stmt.sql)
        if _is_key_definition(item):
            key = _key_definition(item)
            if key is not None and key.primary:
                pk = key.columns
            elif key is not None:
                uniques.append(key.columns)
            continue
        cd = parse_column_def(item, item.name())
        if not item.at_end():
            raise SQLSyntaxError(f"column {cd.column.name}: unexpected text {item.where()}")
        if _has(part, "WITH", "SYSTEM", "VERSIONING"):
            unknown.append(f"column {cd.column.name} is system-versioned")
        columns.append(cd.column)
        if cd.primary_key:
            pk = [cd.column.name]
        elif cd.unique:
            uniques.append([cd.column.name])
    keyed = {k.lower() for k in pk}
    missing = keyed - {c.name.lower() for c in columns}
    if missing:
        raise SQLSyntaxError(f"primary key names unknown columns {', '.join(sorted(missing))}")
    columns = [replace(c, nullable=False) if c.name.lower() in keyed else c for c in columns]
    spelled = {c.name.lower(): c.name for c in columns}
    not_null = {c.name.lower() for c in columns if not c.nullable}
    # Without a primary key, the first unique key of NOT NULL columns identifies rows (as InnoDB's own choice).
    unique = next((u for u in uniques if all(k.lower() in not_null for k in u)), []) if not pk else []
    db, table = name.split(".", 1)
    schema = TableSchema(db, table, tuple(columns), tuple(spelled[k.lower()] for k in pk),
                         tuple(spelled[k.lower()] for k in unique))
    return SchemaChange("create_table", name, schema=schema, conditional=stmt.conditional, sql=stmt.sql)


def _has(tokens, *words: str) -> bool:
    ups = [t.upper for t in tokens]
    return any(ups[i:i + len(words)] == list(words) for i in range(len(ups)))


def _is_key_definition(cur: Cursor) -> bool:
    """Whether a create_definition (or ADD …) defines a key or constraint, not a column."""
    t = cur.peek()
    if t is None or t.kind != WORD:
        return False
    word = t.upper
    if word in _INDEX_WORDS or word in ("PRIMARY", "CONSTRAINT"):
        return True
    return word == "PERIOD" and cur.at("PERIOD", "FOR") or word == "VECTOR" and (cur.at("VECTOR", "INDEX") or
                                                                              cur.at("VECTOR", "KEY"))


@dataclass(frozen=True)
class KeyDefinition:
    """A primary or unique key of a CREATE TABLE or ALTER TABLE … ADD."""

    columns: list[str]
    conditional: bool  # IF NOT EXISTS
    primary: bool


def _key_definition(cur: Cursor) -> KeyDefinition | None:
    """Consume a key/constraint definition; the primary key or a unique key on whole columns
    (no prefix length, no expression), else None."""
    if cur.accept("CONSTRAINT") and not (cur.at("PRIMARY") or cur.at("UNIQUE") or cur.at("FOREIGN")
                                         or cur.at("CHECK")):
        cur.name()
    primary = cur.accept("PRIMARY", "KEY")
    if not primary and not cur.accept("UNIQUE"):
        _skip_spec(cur)
        return None
    conditional = False
    while not cur.at("("):  # IF NOT EXISTS, an index name, USING BTREE
        if cur.accept("IF", "NOT", "EXISTS"):
            conditional = True
        else:
            cur.next()
    parts = split_top_level(cur.skip_group())
    _skip_spec(cur)  # index options
    if any(not p or not p[0].is_name() for p in parts):
        if primary:
            raise SQLSyntaxError("a primary key on an expression")
        return None
    if not primary and any(len(p) > 1 and p[1].text == "(" for p in parts):
        return None  # a prefix of a column is unique, not the column: it identifies nothing
    return KeyDefinition([p[0].text for p in parts], conditional, primary)


def _skip_spec(cur: Cursor) -> None:
    """Consume up to the next comma outside parentheses (or the end)."""
    while not cur.at_end() and not cur.at(","):
        if cur.at("("):
            cur.skip_group()
        else:
            cur.next()


# --- ALTER TABLE --------------------------------------------------------------------------


def _other_tables(stmt: Statement, default_db: str) -> tuple[str, ...]:
    """The other table of an EXCHANGE PARTITION … WITH TABLE t or a CONVERT PARTITION … TO TABLE t /
    CONVERT TABLE t TO PARTITION: its rows change too."""
    body = list(stmt.body)
    out = []
    for i in range(len(body) - 1):
        if body[i + 1].upper == "TABLE" and body[i].upper in ("WITH", "TO", "CONVERT"):
            try:
                out.append(qualified(*Cursor(body[i + 2:], stmt.sql).qualified_name(), default_db))
            except SQLSyntaxError:  # the statement ends there: no table named
                pass
    return tuple(dict.fromkeys(out))


def _alter(stmt: Statement, default_db: str, unknown: list[str]) -> list[SchemaChange]:
    table = stmt.tables[0]
    cur = Cursor(list(stmt.body), stmt.sql)
    out: list[SchemaChange] = []
    while not cur.at_end():
        _alter_spec(cur, stmt.sql, table, default_db, out, unknown)
        if not cur.at_end() and not _partition_options(cur, unknown):
            cur.expect(",")
    return out


def _alter_spec(cur: Cursor, sql: str, table: str, default_db: str, out: list[SchemaChange],
                unknown: list[str]) -> None:
    def change(kind: str, **kw) -> None:
        out.append(SchemaChange(kind, table, sql=sql, **kw))

    if cur.accept("ADD"):
        column = cur.accept("COLUMN")
        if not column and (cur.at("PARTITION") or cur.at("SYSTEM", "VERSIONING")):
            if cur.at("SYSTEM"):
                unknown.append("ADD SYSTEM VERSIONING makes the table system-versioned (history rows, hidden "
                               "columns)")
            _skip_rest(cur)
            return
        if not column and _is_key_definition(cur):
            key = _key_definition(cur)
            if key is not None and key.primary:
                change("alter_primary_key", primary_key=tuple(key.columns), conditional=key.conditional)
            return
        conditional = cur.accept("IF", "NOT", "EXISTS")
        if cur.at("("):
            for part in split_top_level(cur.skip_group()):
                item = Cursor(part, sql)
                if _is_key_definition(item):
                    key = _key_definition(item)
                    if key is not None and key.primary:
                        change("alter_primary_key", primary_key=tuple(key.columns))
                    continue
                _add_column(item, change, unknown, conditional)
                if not item.at_end():
                    raise SQLSyntaxError(f"unexpected text in ADD COLUMN (…) {item.where()}")
            return
        _add_column(cur, change, unknown, conditional)
        return
    if cur.accept("DROP"):
        if cur.accept("PRIMARY", "KEY"):
            change("alter_primary_key")
            return
        if not cur.at("COLUMN") and (cur.at("INDEX") or cur.at("KEY") or cur.at("CONSTRAINT")):
            cur.next()
            cur.accept("IF", "EXISTS")
            if cur.name().upper() == "PRIMARY":
                change("alter_primary_key")
            return
        if not cur.at("COLUMN") and (cur.at("FOREIGN", "KEY") or cur.at("CHECK") or cur.at("PERIOD", "FOR")):
            _skip_spec(cur)
            return
        if not cur.at("COLUMN") and cur.at("PARTITION"):
            unknown.append(_DROP_PARTITION)
            _skip_rest(cur)
            return
        if not cur.at("COLUMN") and cur.at("SYSTEM", "VERSIONING"):
            unknown.append("DROP SYSTEM VERSIONING drops a system-versioned table's history rows")
            _skip_rest(cur)
            return
        cur.accept("COLUMN")
        conditional = cur.accept("IF", "EXISTS")
        change("drop_column", name=cur.name(), conditional=conditional)
        _ = cur.accept("RESTRICT") or cur.accept("CASCADE")
        return
    if cur.accept("CHANGE"):
        cur.accept("COLUMN")
        conditional = cur.accept("IF", "EXISTS")
        old = cur.name()
        _alter_column(cur, change, unknown, old, cur.name(), conditional)
        return
    if cur.accept("MODIFY"):
        cur.accept("COLUMN")
        conditional = cur.accept("IF", "EXISTS")
        name = cur.name()
        _alter_column(cur, change, unknown, name, name, conditional)
        return
    if cur.accept("RENAME"):
        if cur.accept("COLUMN"):
            conditional = cur.accept("IF", "EXISTS")
            old = cur.name()
            cur.expect("TO")
            change("rename_column", name=old, new_name=cur.name(), conditional=conditional)
        elif cur.at("INDEX") or cur.at("KEY"):
            _skip_spec(cur)
        else:
            _ = cur.accept("TO") or cur.accept("AS") or cur.accept("=")
            change("rename_table", new_name=qualified(*cur.qualified_name(), default_db))
        return
    if cur.accept("ALTER"):
        _skip_spec(cur)  # ALTER [COLUMN] c SET/DROP DEFAULT, SET [IN]VISIBLE; ALTER INDEX/CHECK: no data change
        return
    if cur.accept("CONVERT", "TO"):
        if not cur.accept("CHARSET"):
            cur.expect("CHARACTER", "SET")
        cur.accept("=")
        if cur.next().text.lower() == "binary":
            unknown.append("CONVERT TO CHARACTER SET binary turns text columns into binary ones")
        _skip_spec(cur)
        return
    if cur.at("CONVERT") or cur.at("DISCARD") or cur.at("IMPORT") or cur.at("FORCE") or cur.at("ORDER", "BY") or \
            cur.at("DISABLE") or cur.at("ENABLE") or cur.at("WITH") or cur.at("WITHOUT") or cur.at("UPGRADE"):
        if cur.at("CONVERT"):
            unknown.append(_CONVERT_PARTITION)
        elif cur.at("IMPORT"):
            unknown.append(_PARTITION_MOVES_ROWS["IMPORT"])
        if cur.accept("ORDER", "BY"):
            _order_by(cur)
        else:
            _skip_spec(cur)
        return
    if cur.peek() is not None and cur.peek().upper in _PARTITION_KEEPS_ROWS | set(_PARTITION_MOVES_ROWS):
        if cur.peek().upper in _PARTITION_MOVES_ROWS:
            unknown.append(_PARTITION_MOVES_ROWS[cur.peek().upper])
        _skip_rest(cur)  # partition maintenance stands alone in its ALTER
        return
    if _partition_options(cur, unknown):
        return
    if not _table_options(cur):
        raise SQLSyntaxError(f"ALTER TABLE action not understood {cur.where()}")


def _add_column(cur: Cursor, change, unknown: list[str], conditional: bool) -> None:
    name = cur.name()
    cd = parse_column_def(cur, name)
    after = _position(cur)
    try:
        default = existing_rows_value(cd)
    except DefaultNotKnown as e:
        unknown.append(str(e))
        default = None
    change("add_column", column=cd.column, default=default, after=after, conditional=conditional)
    if cd.primary_key:
        change("alter_primary_key", primary_key=(name,))


def _alter_column(cur: Cursor, change, unknown: list[str], old: str, new: str, conditional: bool) -> None:
    cd: ColumnDef = parse_column_def(cur, new)
    if cd.generated:
        unknown.append(f"column {new} becomes generated: the server computes its values")
    change("alter_column_type", name=old, column=cd.column, after=_position(cur), conditional=conditional)
    if cd.primary_key:
        change("alter_primary_key", primary_key=(new,))


def _position(cur: Cursor) -> str | None:
    if cur.accept("FIRST"):
        return ""
    if cur.accept("AFTER"):
        return cur.name()
    return None


def _order_by(cur: Cursor) -> None:
    """ORDER BY a [ASC|DESC], b …: no effect on the rows' values."""
    while True:
        cur.name()
        _ = cur.accept("ASC") or cur.accept("DESC")
        following = cur.peek(2)
        if not (cur.at(",") and cur.peek(1) is not None and cur.peek(1).is_name() and
                (following is None or following.upper in ("ASC", "DESC") or following.text == ",")):
            return
        cur.next()


def _skip_rest(cur: Cursor) -> None:
    cur.i = len(cur.tokens)


def _partition_options(cur: Cursor, unknown: list[str]) -> bool:
    """PARTITION BY … / REMOVE PARTITIONING (the last clause of an ALTER): rows stay."""
    if cur.at("PARTITION", "BY") or cur.at("REMOVE", "PARTITIONING"):
        _skip_rest(cur)
        return True
    return False


def _table_options(cur: Cursor) -> bool:
    """Consume one or more table options (``ENGINE=InnoDB AUTO_INCREMENT=5``); False if none is next."""
    found = False
    while _table_option(cur):
        found = True
    return found


def _table_option(cur: Cursor) -> bool:
    start = cur.i
    cur.accept("DEFAULT")
    if cur.accept("CHARACTER", "SET") or cur.accept("DATA", "DIRECTORY") or cur.accept("INDEX", "DIRECTORY"):
        pass
    elif (t := cur.peek()) is not None and (t.upper in _TABLE_OPTIONS or t.kind == WORD and cur.peek(1) is not None
                                             and cur.peek(1).text == "="):  # or an engine-defined one
        cur.next()
    else:
        cur.i = start
        return False
    cur.accept("=")
    if cur.at("("):
        cur.skip_group()  # UNION=(t1, t2)
    else:
        cur.next()
    return True


# --- statement order ----------------------------------------------------------------------


def _order(changes: list[SchemaChange]) -> list[SchemaChange]:
    """The changes of one ALTER in an order that applies one by one (module invariants)."""
    drops = [c for c in changes if c.kind == "drop_column"]
    in_place = [c for c in changes if c.kind == "rename_column" or c.kind == "alter_column_type" and c.after is None]
    placed = [c for c in changes if c.kind == "add_column" or c.kind == "alter_column_type" and c.after is not None]
    keys = [c for c in changes if c.kind == "alter_primary_key"]
    tables = [c for c in changes if c.kind == "rename_table"]
    ordered: list[SchemaChange] = []
    pending = list(in_place)
    while pending:  # a change that takes a name waits for the change that frees it
        ready = next((c for c in pending if not any(
            d is not c and _key(d.name) == _key(_new_name(c)) != _key(c.name) for d in pending)), None)
        if ready is None:
            raise ValueError("column renames in one statement that swap names: no one-by-one order gives them")
        ordered.append(ready)
        pending.remove(ready)
    taken = {_key(_new_name(c)) for c in ordered if _key(_new_name(c)) != _key(c.name)}
    if any(c.kind == "alter_column_type" and _key(c.name) in taken for c in placed):
        raise ValueError("a column moved with FIRST/AFTER under a name another change of the statement gives")
    return drops + ordered + placed + keys + tables


def _new_name(c: SchemaChange) -> str:
    return c.new_name if c.kind == "rename_column" else c.column.name


def _key(name: str | None) -> str:
    return (name or "").lower()


# --- evolution ----------------------------------------------------------------------------


def evolve_all(schemas: Mapping[str, TableSchema], changes: list[SchemaChange]) -> dict[str, TableSchema]:
    """The schemas of the tables in ``schemas`` ("db.table" → schema) after one statement's
    changes (created tables join, dropped and renamed ones leave, others are left out);
    raises ``UnparsedDDL`` as :func:`evolve_schema` does when a change does not fit."""
    out = dict(schemas)
    for c in changes:
        if c.kind == "create_table":
            if c.schema is not None and not (c.conditional and c.table in out):
                out[c.table] = c.schema
            elif c.like in out and not (c.conditional and c.table in out):
                out[c.table] = out[c.like].renamed(c.table)
        elif c.kind in ("drop_table", "rename_table"):
            moved = out.pop(c.table, None)
            if moved is not None and c.kind == "rename_table":
                out[c.new_name] = moved.renamed(c.new_name)
        elif c.table in out:
            out[c.table] = evolve_schema(out[c.table], c)
    return out


def evolve_schema(schema: TableSchema, change: SchemaChange) -> TableSchema:
    """The table's schema right after ``change`` (column and key changes; see the module invariants)."""
    cols = list(schema.columns)
    pk = list(schema.primary_key)
    unique = list(schema.unique_key)  # kept while all its columns are there, NOT NULL

    def index(name: str | None) -> int | None:
        return next((i for i, c in enumerate(cols) if c.name.lower() == _key(name)), None)

    def mismatch(what: str) -> UnparsedDDL:
        return UnparsedDDL(change.sql or change.describe(), f"{what} in the schema binlake has for it",
                           (schema.qualified_name,))

    def place(after: str | None) -> int:
        if after is None:
            return len(cols)
        if after == "":
            return 0
        i = index(after)
        if i is None:
            raise mismatch(f"AFTER names column {after}, which is not")
        return i + 1

    def rename_key(old: str, new: str) -> None:
        pk[:] = [new if k.lower() == old.lower() else k for k in pk]
        unique[:] = [new if k.lower() == old.lower() else k for k in unique]

    kind = change.kind
    if kind == "add_column":
        if index(change.column.name) is not None:
            if change.conditional:
                return schema
            raise mismatch(f"column {change.column.name} is added but already there")
        cols.insert(place(change.after), change.column)
    elif kind in ("drop_column", "rename_column", "alter_column_type"):
        i = index(change.name)
        if i is None:
            if change.conditional:
                return schema
            raise mismatch(f"column {change.name} is not there")
        old = cols[i]
        if kind == "drop_column":
            del cols[i]
            pk = [k for k in pk if k.lower() != old.name.lower()]
            if old.name.lower() in {k.lower() for k in unique}:
                unique = []
        else:
            new_name = change.new_name if kind == "rename_column" else change.column.name
            other = index(new_name)
            if other is not None and other != i:
                raise mismatch(f"column {old.name} is renamed to {new_name}, which is already taken")
            rename_key(old.name, new_name)
            if kind == "rename_column":
                cols[i] = replace(old, name=new_name)
            else:
                new = replace(change.column, nullable=change.column.nullable and new_name.lower() not in
                              {k.lower() for k in pk})
                del cols[i]
                cols.insert(i if change.after is None else place(change.after), new)
                if new.nullable and new_name.lower() in {k.lower() for k in unique}:
                    unique = []
    elif kind == "alter_primary_key":
        if change.conditional and pk:
            return schema
        missing = [k for k in change.primary_key if index(k) is None]
        if missing:
            raise mismatch(f"the primary key names column {', '.join(missing)}, which is not")
        pk = [cols[index(k)].name for k in change.primary_key]
        keyed = {k.lower() for k in pk}
        cols = [replace(c, nullable=False) if c.name.lower() in keyed else c for c in cols]
    return TableSchema(schema.database, schema.table, tuple(cols), tuple(pk), tuple(unique))

