"""Source table descriptions read from information_schema (snapshot planning and
the chunk reader); the binlog path carries its own table-map metadata."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    """One source column, with what the type mapping needs to know."""

    name: str
    data_type: str  # lower-case information_schema DATA_TYPE: int, varchar, decimal...
    column_type: str  # full COLUMN_TYPE: "int(10) unsigned", "enum('a','b')"...
    nullable: bool = True
    precision: int | None = None  # NUMERIC_PRECISION (DECIMAL), or length of BIT(n)
    scale: int | None = None
    datetime_precision: int | None = None
    char_length: int | None = None  # CHARACTER_MAXIMUM_LENGTH (BINARY(n) padding)
    collation: str | None = None

    @property
    def unsigned(self) -> bool:
        return "unsigned" in self.column_type or "zerofill" in self.column_type  # ZEROFILL implies UNSIGNED

    @property
    def members(self) -> tuple[str, ...]:
        """ENUM/SET members in definition order."""
        inner = self.column_type[self.column_type.index("(") + 1 : self.column_type.rindex(")")]
        return tuple(m.replace("''", "'") for m in re.findall(r"'((?:[^']|'')*)'", inner))


_COLUMN_FIELDS = tuple(f.name for f in dataclasses.fields(Column))


@dataclass(frozen=True)
class TableSchema:
    """Columns in ordinal order and the primary key (empty when there is none); for a table
    without one, a key that identifies its rows all the same (``unique_key``: a NOT NULL unique
    key, or the configured ``source.key_columns``), if it has one."""

    database: str
    table: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    unique_key: tuple[str, ...] = ()

    @property
    def qualified_name(self) -> str:
        return f"{self.database}.{self.table}"

    @property
    def row_key(self) -> tuple[str, ...]:
        """The columns that identify a row: the primary key, else the unique key; empty for a
        table whose rows only their whole values identify."""
        return self.primary_key or self.unique_key

    def to_json(self) -> str:
        """The schema as JSON (what :meth:`from_json` reads): ``dataclasses.asdict``'s document,
        built directly; asdict deep-copies every field and cost the snapshot of 2,000 tables 1.8 ms
        a table (bench/many_tables.py)."""
        return json.dumps({"database": self.database, "table": self.table,
                           "columns": [{n: getattr(c, n) for n in _COLUMN_FIELDS} for c in self.columns],
                           "primary_key": list(self.primary_key), "unique_key": list(self.unique_key)})

    @classmethod
    def from_json(cls, text: str) -> TableSchema:
        d = json.loads(text)
        return cls(d["database"], d["table"], tuple(Column(**c) for c in d["columns"]), tuple(d["primary_key"]),
                   tuple(d.get("unique_key", ())))  # a schema recorded by an older binlake has none

    def renamed(self, qualified_name: str) -> TableSchema:
        """The same columns under another "db.table" name."""
        db, table = qualified_name.split(".", 1)
        return dataclasses.replace(self, database=db, table=table)

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"{self.qualified_name} has no column {name!r}")


def list_tables(cursor) -> list[str]:
    """Every base table on the server as "db.table", system schemas excluded."""
    cursor.execute(
        "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' "
        "AND TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys') "
        "ORDER BY TABLE_SCHEMA, TABLE_NAME"
    )
    return [f"{db}.{t}" for db, t in cursor.fetchall()]


COLUMNS_SELECT = ("SELECT TABLE_NAME, COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, NUMERIC_PRECISION, "
                  "NUMERIC_SCALE, DATETIME_PRECISION, CHARACTER_MAXIMUM_LENGTH, COLLATION_NAME "
                  "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME {} "
                  "ORDER BY TABLE_NAME, ORDINAL_POSITION")
PRIMARY_SELECT = ("SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
                  "AND TABLE_NAME {} AND INDEX_NAME = 'PRIMARY' ORDER BY TABLE_NAME, SEQ_IN_INDEX")
DESCRIBE_BATCH = 500  # tables named in one information_schema query (describe_in)


def _column(dtype, name, ctype, nullable, prec, scale, dtprec, clen, coll) -> Column:
    dtype = dtype.lower()
    if dtype == "bit":  # information_schema gives BIT(n)'s n as NUMERIC_PRECISION
        prec = int(re.search(r"\((\d+)\)", ctype).group(1)) if "(" in ctype else 1
    return Column(name, dtype, ctype.lower() if dtype not in ("enum", "set") else ctype,
                  nullable == "YES", _int(prec), _int(scale), _int(dtprec), _int(clen), coll)


def describe_table(cursor, database: str, table: str) -> TableSchema:
    """Read a table's columns, primary key and (without one) NOT NULL unique key from
    information_schema."""
    found = describe_in(cursor, database, [table])
    if table not in found:
        raise LookupError(f"table {database}.{table} does not exist")
    return found[table]


def describe_in(cursor, database: str, tables: list[str]) -> dict[str, TableSchema]:
    """:func:`describe_table` of each of ``tables`` of ``database`` that exists, by name: two
    information_schema queries per ``DESCRIBE_BATCH`` tables, not two per table (a snapshot of
    many small tables describes every one of them)."""
    out: dict[str, TableSchema] = {}
    for i in range(0, len(tables), DESCRIBE_BATCH):
        batch = tables[i:i + DESCRIBE_BATCH]
        # The server may report a name in another case than asked (lower_case_table_names): the
        # schema keeps the name as asked, as describe_table did.
        asked = {t.lower(): t for t in batch}
        where = "= %s" if len(batch) == 1 else f"IN ({', '.join(['%s'] * len(batch))})"
        columns: dict[str, list[Column]] = {}
        cursor.execute(COLUMNS_SELECT.format(where), (database, *batch))
        for table, name, dtype, *rest in cursor.fetchall():
            columns.setdefault(asked.get(table.lower(), table), []).append(_column(dtype, name, *rest))
        keys: dict[str, list[str]] = {}
        cursor.execute(PRIMARY_SELECT.format(where), (database, *batch))
        for table, name in cursor.fetchall():
            keys.setdefault(asked.get(table.lower(), table), []).append(name)
        for table in batch:
            if table in columns:
                cols, pk = columns[table], tuple(keys.get(table, ()))
                out[table] = TableSchema(database, table, tuple(cols), pk,
                                         () if pk else _unique_key(cursor, database, table, cols))
    return out


def _unique_key(cursor, database: str, table: str, columns: list[Column]) -> tuple[str, ...]:
    """The first (by name) unique key whose columns are all NOT NULL and whole (no prefix
    length): it identifies rows as a primary key does (InnoDB itself clusters on it)."""
    cursor.execute(
        "SELECT INDEX_NAME, COLUMN_NAME, SUB_PART FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
        "AND TABLE_NAME = %s AND NON_UNIQUE = 0 ORDER BY INDEX_NAME, SEQ_IN_INDEX",
        (database, table),
    )
    nullable = {c.name.lower() for c in columns if c.nullable}
    keys: dict[str, list] = {}
    for index, column, sub_part in cursor.fetchall():
        keys.setdefault(index, []).append((column, sub_part))
    for parts in keys.values():
        if all(column is not None and column.lower() not in nullable and sub_part is None
               for column, sub_part in parts):
            return tuple(column for column, _ in parts)
    return ()


def _int(v) -> int | None:
    return None if v is None else int(v)


def quote_ident(name: str) -> str:
    """Backtick-quote a MySQL identifier."""
    return "`" + name.replace("`", "``") + "`"
