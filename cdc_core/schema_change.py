"""Typed schema-change events parsed from binlog DDL with sqlglot, and their effect on
a source table's schema.

Invariants (tests/test_schema_change.py):
- ``parse_ddl`` returns, for one statement, the changes in statement order (several
  alterations of one ALTER are several events); names are qualified with the
  QueryEvent's schema when the statement does not name a database.
- A statement that touches tables but cannot be parsed into events raises
  ``UnparsedDDL`` with the statement; nothing is skipped silently. Statements that
  change no table schema (indexes, CREATE DATABASE, views) give no events.
- ``evolve_schema(schema, change)`` is the source table's schema right after the
  change: columns in MySQL's ordinal order (FIRST/AFTER honoured).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from decimal import Decimal

from sqlglot import exp

from cdc_core.ddl import parse_statement
from cdc_core.table_schema import Column, TableSchema

_TYPE = re.compile(r"^\s*([A-Za-z]+)\s*(?:\((.*)\))?\s*(.*)$", re.DOTALL)
_ALIASES = {"integer": "int", "boolean": "tinyint", "bool": "tinyint", "dec": "decimal", "numeric": "decimal",
            "real": "double", "character": "char"}


class UnparsedDDL(ValueError):
    """A DDL statement on a captured table that binlake cannot turn into schema changes."""

    def __init__(self, sql: str, why: str, tables: tuple[str, ...] = ()):
        super().__init__(f"cannot parse DDL ({why}): {sql}")
        self.sql = sql
        self.tables = tables  # "db.table" names it touches, where they could be read


@dataclass(frozen=True)
class SchemaChange:
    """One schema change on ``table`` ("db.table").

    kind: create_table | add_column | drop_column | rename_column | alter_column_type |
    truncate_table | drop_table | rename_table.
    """

    kind: str
    table: str
    column: Column | None = None  # added / retyped column (its new definition)
    default: object = None  # add_column: the DEFAULT existing rows take (None: NULL or implicit)
    name: str | None = None  # dropped / renamed / retyped column's current name
    new_name: str | None = None  # rename_column: new column name; rename_table: new "db.table"
    after: str | None = None  # add/alter with AFTER col; "" for FIRST; None: at the end / in place
    schema: TableSchema | None = None  # create_table: the new table
    like: str | None = None  # create_table ... LIKE "db.table"

    def describe(self) -> str:
        """A short human description for logs, status and history."""
        what = {"add_column": f"add column {self.column.name if self.column else ''} {self._type()}",
                "drop_column": f"drop column {self.name}",
                "rename_column": f"rename column {self.name} to {self.new_name}",
                "alter_column_type": f"change column {self.name} to {self.column.name if self.column else ''} "
                                     f"{self._type()}",
                "rename_table": f"rename to {self.new_name}"}.get(self.kind, self.kind.replace("_", " "))
        return f"{self.table}: {what}".strip()

    def _type(self) -> str:
        return self.column.column_type if self.column else ""


def column_from_def(name: str, type_sql: str, nullable: bool = True) -> Column:
    """A Column as information_schema would describe it, from a MySQL type text."""
    m = _TYPE.match(type_sql)
    if not m:
        raise ValueError(f"unknown column type {type_sql!r}")
    base, params, rest = m.group(1).lower(), m.group(2), m.group(3).lower()
    unsigned = "unsigned" in rest
    if base == "double" and rest.startswith("precision"):
        rest = rest[len("precision"):]
    base = _ALIASES.get(base, base)
    if params and base not in ("enum", "set"):
        params = params.replace(" ", "")
    args = params.split(",") if params and base not in ("enum", "set") else []
    precision = scale = dt_precision = char_length = None
    if base == "decimal":
        precision, scale = (int(args[0]) if args else 10), (int(args[1]) if len(args) > 1 else 0)
    elif base == "bit":
        precision = int(args[0]) if args else 1
    elif base in ("char", "varchar", "binary", "varbinary"):
        char_length = int(args[0]) if args else 1
    elif base in ("datetime", "timestamp", "time"):
        dt_precision = int(args[0]) if args else 0
    if m.group(1).lower() in ("boolean", "bool"):
        params = "1"
    if base in ("enum", "set"):
        column_type = f"{base}({params})"
    else:
        column_type = base + (f"({params})" if params else "") + (" unsigned" if unsigned else "")
    return Column(name, base, column_type, nullable, precision, scale, dt_precision, char_length)


def column_default(cd: exp.ColumnDef):
    """The DEFAULT literal of a column definition as a Python value (None when absent or NULL)."""
    for c in cd.args.get("constraints") or []:
        k = c.args.get("kind")
        if isinstance(k, exp.DefaultColumnConstraint):
            lit = k.this
            if isinstance(lit, exp.Neg) and isinstance(lit.this, exp.Literal):
                return -_literal(lit.this)
            return _literal(lit) if isinstance(lit, exp.Literal) else None
    return None


def _literal(lit: exp.Literal):
    if lit.is_string:
        return lit.this
    text = lit.this
    return int(text) if re.fullmatch(r"\d+", text) else Decimal(text)


def _coldef_column(cd: exp.ColumnDef) -> tuple[Column, bool]:
    kind = cd.args.get("kind")
    if kind is None:
        raise ValueError(f"column {cd.name} has no type")
    constraints = [c.args.get("kind") for c in cd.args.get("constraints") or []]
    not_null = any(isinstance(k, exp.NotNullColumnConstraint) and not k.args.get("allow_null") for k in constraints)
    primary = any(isinstance(k, exp.PrimaryKeyColumnConstraint) for k in constraints)
    return column_from_def(cd.name, kind.sql(dialect="mysql"), nullable=not (not_null or primary)), primary


def _position(node) -> str | None:
    pos = node.args.get("position") if node is not None else None
    if pos is None:
        return None
    if str(pos.args.get("position", "")).upper() == "FIRST":
        return ""
    return pos.this.name if pos.this is not None else None


def parse_ddl(sql: str, default_db: str) -> list[SchemaChange]:
    """The schema changes of one DDL statement (see the module invariants)."""
    stmt = parse_statement(sql, default_db)
    if stmt.kind == "rename":
        names = stmt.tables
        return [SchemaChange("rename_table", a, new_name=b) for a, b in zip(names[::2], names[1::2])]
    if stmt.kind == "truncate":
        return [SchemaChange("truncate_table", t) for t in stmt.tables]
    if stmt.kind == "drop":
        return [SchemaChange("drop_table", t) for t in stmt.tables]
    if stmt.kind == "unparsed":
        raise UnparsedDDL(sql, "sqlglot could not parse it", stmt.tables)
    if stmt.kind not in ("create", "alter"):
        return []
    tree = stmt.tree
    table = tree.find(exp.Table)
    name = f"{table.db or default_db}.{table.name}"
    try:
        if stmt.kind == "create":
            return [_create(tree, name, default_db)]
        return [c for action in tree.args.get("actions") or [] for c in _alter_action(action, name, default_db)]
    except (ValueError, AttributeError, IndexError) as e:
        raise UnparsedDDL(sql, str(e), stmt.tables) from None


def _create(tree: exp.Create, name: str, default_db: str) -> SchemaChange:
    like = tree.find(exp.LikeProperty)
    if like is not None:
        src = like.this
        return SchemaChange("create_table", name, like=f"{src.db or default_db}.{src.name}")
    schema = tree.this
    if not isinstance(schema, exp.Schema):
        raise ValueError("CREATE TABLE ... AS SELECT or without columns")
    columns, pk = [], []
    for e in schema.expressions:
        if isinstance(e, exp.ColumnDef):
            col, primary = _coldef_column(e)
            columns.append(col)
            if primary:
                pk.append(col.name)
        elif isinstance(e, exp.PrimaryKey):
            pk = [i.name for i in e.expressions]
    pk_set = set(pk)
    columns = [replace(c, nullable=False) if c.name in pk_set else c for c in columns]
    db, t = name.split(".", 1)
    return SchemaChange("create_table", name, schema=TableSchema(db, t, tuple(columns), tuple(pk)))


def _alter_action(action, name: str, default_db: str) -> list[SchemaChange]:
    if isinstance(action, exp.ColumnDef):
        col, _ = _coldef_column(action)
        return [SchemaChange("add_column", name, column=col, after=_position(action), default=column_default(action))]
    if isinstance(action, exp.Drop) and str(action.args.get("kind", "")).upper() == "COLUMN":
        return [SchemaChange("drop_column", name, name=c.name) for c in action.args.get("tables") or []]
    if isinstance(action, exp.RenameColumn):
        return [SchemaChange("rename_column", name, name=action.this.name, new_name=action.args["to"].name)]
    if isinstance(action, exp.ModifyColumn):
        cd = action.this
        col, _ = _coldef_column(cd)
        old = action.args.get("rename_from")
        return [SchemaChange("alter_column_type", name, column=col, name=old.name if old is not None else col.name,
                             after=_position(cd))]
    if isinstance(action, exp.AlterRename):
        t = action.this
        return [SchemaChange("rename_table", name, new_name=f"{t.db or name.split('.', 1)[0]}.{t.name}")]
    if isinstance(action, (exp.AddConstraint, exp.Drop, exp.AlterColumn, exp.AlterIndex)):
        return []  # indexes, constraints, defaults: no effect on the data's shape
    if isinstance(action, exp.Command) or type(action).__name__ in ("Command",):
        raise ValueError(f"unsupported ALTER action {action.sql(dialect='mysql')!r}")
    return []


def evolve_schema(schema: TableSchema, change: SchemaChange) -> TableSchema:
    """The table's schema right after ``change`` (column changes only)."""
    cols = list(schema.columns)
    names = [c.name for c in cols]
    pk = list(schema.primary_key)
    if change.kind == "add_column":
        if change.column.name in names:
            return schema  # already applied (a replayed statement)
        cols.insert(_insert_at(names, change.after), change.column)
    elif change.kind == "drop_column":
        if change.name in names:
            del cols[names.index(change.name)]
    elif change.kind == "rename_column":
        if change.name in names:
            i = names.index(change.name)
            cols[i] = replace(cols[i], name=change.new_name)
            pk = [change.new_name if k == change.name else k for k in pk]
    elif change.kind == "alter_column_type":
        if change.name not in names:
            return schema
        i = names.index(change.name)
        old = cols.pop(i)
        new = replace(change.column, nullable=change.column.nullable and old.name not in pk)
        cols.insert(i if change.after is None else _insert_at([c.name for c in cols], change.after), new)
        pk = [new.name if k == old.name else k for k in pk]
    return TableSchema(schema.database, schema.table, tuple(cols), tuple(pk))


def _insert_at(names: list[str], after: str | None) -> int:
    if after is None:
        return len(names)
    if after == "":
        return 0
    return names.index(after) + 1
