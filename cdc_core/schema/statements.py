"""Statements found in the binlog as QueryEvents (DDL, TRUNCATE): their kind and the
tables they name, read with the MySQL lexer (cdc_core/schema/sql_lexer.py).

Invariants (tests/test_ddl_parse.py):
- The database of an unqualified table name is the QueryEvent's schema (the session's
  current database, also for ``ALTER TABLE db.t RENAME TO t2``); a qualified name keeps
  its own (MariaDB leaves the event's schema empty then).
- ``kind`` is alter | create | drop | rename | truncate for statements on tables;
  ``dml`` for a row change the binlog holds as a statement (a session with
  ``binlog_format=STATEMENT`` or ``MIXED``): its rows are not in the binlog, and ``tables``
  names every table it may have written (every name in it, qualified or not: more than
  it wrote, never fewer);
  ``other`` for everything else (transactions, grants, indexes made with CREATE/DROP
  INDEX, databases, views, routines) and for temporary tables (never captured: in ROW
  format the server does not even write them to the binlog); ``unparsed`` when the head
  of a table statement cannot be read, naming the tables wherever they could be read.
- ``body`` holds the tokens after the table name of an ALTER or CREATE TABLE (its
  alterations, or its definition), read by cdc_core/schema/change.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cdc_core.schema.sql_lexer import NUMBER, OP, Cursor, SQLSyntaxError, Token, tokenize


@dataclass(frozen=True)
class Statement:
    """A non-DML statement: its kind and the "db.table" names it touches."""

    kind: str  # truncate | alter | create | drop | rename | dml | unparsed | other
    tables: tuple[str, ...]
    sql: str
    body: tuple[Token, ...] = field(default=(), compare=False, repr=False)  # ALTER/CREATE: after the table name
    conditional: bool = False  # CREATE TABLE IF NOT EXISTS
    error: str = ""  # unparsed: why


def qualified(db: str | None, name: str, default_db: str) -> str:
    """ "db.table" of a table name as written (``db`` None when unqualified)."""
    return f"{db or default_db}.{name}"


def parse_statement(sql: str, default_db: str) -> Statement:
    """Classify ``sql`` and name the tables it touches (see the module invariants)."""
    try:
        tokens = tokenize(sql)
    except SQLSyntaxError as e:
        return Statement("unparsed", (), sql, error=str(e))
    cur = Cursor(tokens, sql)
    head = cur.peek().upper if cur.peek() is not None else ""
    if head in DML:
        return Statement("dml", _written(tokens, head, default_db), sql)
    reader = {"ALTER": _alter, "CREATE": _create, "DROP": _drop, "RENAME": _rename, "TRUNCATE": _truncate}.get(head)
    if reader is None:
        return Statement("other", (), sql)
    cur.next()
    tables: list[str] = []
    try:
        return reader(cur, sql, default_db, tables)
    except SQLSyntaxError as e:
        return Statement("unparsed", tuple(tables), sql, error=str(e))


DML = frozenset({"INSERT", "REPLACE", "UPDATE", "DELETE", "LOAD"})


def _written(tokens: list[Token], head: str, default_db: str) -> tuple[str, ...]:
    """The tables a DML statement may write: an INSERT's, REPLACE's or LOAD DATA's target
    (not the tables an ``INSERT … SELECT`` reads); for UPDATE the names before SET, for
    DELETE every name (multi-table forms)."""
    if head in ("INSERT", "REPLACE", "LOAD"):
        cur = Cursor(tokens)
        try:
            while not cur.at_end():
                t = cur.next()
                if t.upper == "INTO":  # LOAD DATA … INTO TABLE t
                    cur.accept("TABLE")
                    return (qualified(*cur.qualified_name(), default_db),)
                if head != "LOAD" and t.upper not in ("INSERT", "REPLACE", "LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY",
                                                     "IGNORE"):
                    cur = Cursor(tokens[tokens.index(t):])  # INSERT t VALUES …: INTO left out
                    return (qualified(*cur.qualified_name(), default_db),)
        except SQLSyntaxError:
            pass  # unreadable: every name, below
    if head == "UPDATE":
        end = next((i for i, t in enumerate(tokens) if t.upper == "SET"), len(tokens))
        return _names(tokens[:end], default_db)
    return _names(tokens, default_db)


def _names(tokens: list[Token], default_db: str) -> tuple[str, ...]:
    """Every "db.table" the names of ``tokens`` could be: ``a.b`` as written, and each name in
    the statement's database."""
    names = []
    for i, t in enumerate(tokens):
        if not t.is_name():
            continue
        names.append(qualified(None, t.text, default_db))
        if i + 2 < len(tokens) and tokens[i + 1].kind == OP and tokens[i + 1].text == "." and tokens[i + 2].is_name():
            names.append(qualified(t.text, tokens[i + 2].text, default_db))
    return tuple(dict.fromkeys(names))


def _wait(cur: Cursor) -> None:
    """``WAIT n`` or ``NOWAIT`` (MariaDB's lock timeouts)."""
    if cur.accept("WAIT"):
        if cur.next().kind != NUMBER:
            raise SQLSyntaxError("WAIT needs a number of seconds")
    else:
        cur.accept("NOWAIT")


def _alter(cur: Cursor, sql: str, default_db: str, tables: list[str]) -> Statement:
    cur.accept("ONLINE")
    cur.accept("IGNORE")
    if not cur.accept("TABLE"):
        return Statement("other", (), sql)  # ALTER DATABASE, VIEW, USER, EVENT, SEQUENCE...
    cur.accept("IF", "EXISTS")
    tables.append(qualified(*cur.qualified_name(), default_db))
    _wait(cur)
    return Statement("alter", tuple(tables), sql, tuple(cur.tokens[cur.i:]))


def _create(cur: Cursor, sql: str, default_db: str, tables: list[str]) -> Statement:
    cur.accept("OR", "REPLACE")
    temporary = cur.accept("TEMPORARY")
    if not cur.accept("TABLE") or temporary:
        return Statement("other", (), sql)  # CREATE INDEX, DATABASE, VIEW...; temporary tables are never captured
    conditional = cur.accept("IF", "NOT", "EXISTS")
    tables.append(qualified(*cur.qualified_name(), default_db))
    return Statement("create", tuple(tables), sql, tuple(cur.tokens[cur.i:]), conditional)


def _drop(cur: Cursor, sql: str, default_db: str, tables: list[str]) -> Statement:
    temporary = cur.accept("TEMPORARY")
    if not (cur.accept("TABLE") or cur.accept("TABLES")) or temporary:
        return Statement("other", (), sql)
    cur.accept("IF", "EXISTS")
    tables.append(qualified(*cur.qualified_name(), default_db))
    while cur.accept(","):
        tables.append(qualified(*cur.qualified_name(), default_db))
    _wait(cur)
    _ = cur.accept("RESTRICT") or cur.accept("CASCADE")
    _end(cur)
    return Statement("drop", tuple(tables), sql)


def _rename(cur: Cursor, sql: str, default_db: str, tables: list[str]) -> Statement:
    if not (cur.accept("TABLE") or cur.accept("TABLES")):
        return Statement("other", (), sql)  # RENAME USER
    cur.accept("IF", "EXISTS")
    while True:
        tables.append(qualified(*cur.qualified_name(), default_db))
        _wait(cur)
        cur.expect("TO")
        tables.append(qualified(*cur.qualified_name(), default_db))
        if not cur.accept(","):
            break
    _end(cur)
    return Statement("rename", tuple(tables), sql)


def _truncate(cur: Cursor, sql: str, default_db: str, tables: list[str]) -> Statement:
    cur.accept("TABLE")
    tables.append(qualified(*cur.qualified_name(), default_db))
    _wait(cur)
    _end(cur)
    return Statement("truncate", tuple(tables), sql)


def _end(cur: Cursor) -> None:
    if not cur.at_end():
        raise SQLSyntaxError(f"unexpected text {cur.where()}")
