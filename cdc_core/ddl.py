"""Statements found in the binlog as QueryEvents (DDL, TRUNCATE), parsed with sqlglot.

Invariants:
- The database of an unqualified table name is the QueryEvent's schema; a
  qualified name keeps its own (MariaDB leaves the event's schema empty then).
- A statement sqlglot cannot parse is returned as kind ``unparsed`` with no
  tables, never dropped: the caller decides whether it concerns a captured table.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp

log = logging.getLogger(__name__)

_RENAME = re.compile(r"^\s*RENAME\s+TABLES?\s+(.*)$", re.IGNORECASE | re.DOTALL)
_IDENT = r"(?:`(?:[^`]|``)+`|[\w$]+)"
_NAME = rf"({_IDENT}(?:\s*\.\s*{_IDENT})?)"
_PAIR = re.compile(rf"{_NAME}\s+TO\s+{_NAME}", re.IGNORECASE)
# A table DDL sqlglot only keeps as an opaque command (e.g. ALTER TABLE t ADD COLUMN (a INT, b INT)).
_TABLE_DDL = re.compile(rf"^\s*(?:/\*.*?\*/\s*)*(?:ALTER|CREATE|DROP|TRUNCATE)\s+(?:TEMPORARY\s+)?TABLE\s+"
                        rf"(?:IF\s+(?:NOT\s+)?EXISTS\s+)?{_NAME}", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class Statement:
    """A non-DML statement: its kind and the "db.table" names it touches."""

    kind: str  # truncate | alter | create | drop | rename | unparsed | other
    tables: tuple[str, ...]
    sql: str
    tree: exp.Expression | None = field(default=None, compare=False, repr=False)  # sqlglot's parse


def _qualified(name: str, default_db: str) -> str:
    parts = [p.strip().strip("`").replace("``", "`") for p in re.split(r"\.(?=(?:[^`]*`[^`]*`)*[^`]*$)", name)]
    return f"{parts[0]}.{parts[1]}" if len(parts) == 2 else f"{default_db}.{parts[0]}"


def parse_statement(sql: str, default_db: str) -> Statement:
    """Classify ``sql`` and name the tables it touches (see the module invariants)."""
    m = _RENAME.match(sql)
    if m:  # sqlglot parses RENAME TABLE as an opaque command
        names = tuple(_qualified(n, default_db) for pair in _PAIR.findall(m.group(1)) for n in pair)
        return Statement("rename", names, sql)
    try:
        tree = sqlglot.parse_one(sql, read="mysql")
    except sqlglot.errors.ParseError:
        log.debug("unparsed statement", exc_info=True)
        return Statement("unparsed", (), sql)
    if isinstance(tree, exp.Command):
        m = _TABLE_DDL.match(sql)
        if m:  # a table's DDL that sqlglot could not parse: never "other", never skipped
            return Statement("unparsed", (_qualified(m.group(1), default_db),), sql)
        return Statement("other", (), sql)
    kind = {exp.TruncateTable: "truncate", exp.Alter: "alter", exp.Create: "create", exp.Drop: "drop"}.get(
        type(tree), "other")
    if kind in ("create", "drop") and str(tree.args.get("kind", "")).upper() not in ("TABLE", ""):
        kind = "other"  # CREATE/DROP DATABASE, VIEW, INDEX on no captured table data
    tables = tuple(f"{t.db or default_db}.{t.name}" for t in tree.find_all(exp.Table) if t.name)
    return Statement(kind, tables, sql, tree)
