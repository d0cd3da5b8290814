"""Foreign-key actions MySQL does not write to the binlog.

InnoDB carries out a foreign key's ON DELETE / ON UPDATE CASCADE, SET NULL and SET DEFAULT
inside the storage engine: the binlog holds the parent's row change, never the child rows
it changed (measured on MariaDB 10.11: a parent DELETE that cascaded to two child rows is
one row event of the parent). A stream that applies the binlog alone keeps child rows MySQL
deleted or changed; Debezium and Flink CDC document this and leave it.

Invariants (tests/test_foreign_key_cascades.py):
- Every captured child of a cascading foreign key whose parent is captured is backfilled
  online (cdc_core/chunks/incremental.py: re-read whole, merged into the live stream) after each
  micro-batch holding a delete of its parent, or an update of a parent column the key
  references (when its ON UPDATE action cascades); a child's own cascaded changes fire its
  children in turn. The request is saved before that batch's checkpoint, so a
  crash cannot lose it; one waiting request covers every later cascade (it reads the table
  after them). The child equals MySQL again once that backfill is merged.
- A child whose parent is not captured cannot be repaired this way (the stream never sees
  the parent's changes): it is named at the stream's start.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdc_core.binlog.events import Op

CASCADING = frozenset({"CASCADE", "SET NULL", "SET DEFAULT"})


@dataclass(frozen=True)
class Cascade:
    """A foreign key of ``child`` referencing ``parent`` with an action the binlog does not show."""

    child: str  # "db.table"
    parent: str
    constraint: str
    on_delete: str
    on_update: str
    referenced: tuple[str, ...] = ()  # the parent's columns the key references

    def fires_on(self, op: Op) -> bool:
        """Whether a parent row change ``op`` may change child rows unseen (an update: when it
        changes a referenced column, :meth:`changes_key`)."""
        if op == Op.DELETE:
            return self.on_delete in CASCADING
        return op == Op.UPDATE and self.on_update in CASCADING

    def changes_key(self, columns: list[str], rows: list) -> bool:
        """Whether an update's ``(before, after)`` rows, in ``columns``' order, change a
        referenced column (names compared as MySQL does, case-insensitively)."""
        names = [c.lower() for c in columns]
        idx = [names.index(c.lower()) for c in self.referenced if c.lower() in names]
        if len(idx) < len(self.referenced):  # a referenced column not in the row: assume it changed
            return True
        return any(before[i] != after[i] for before, after in rows for i in idx)


def cascades(cur, children: list[str]) -> list[Cascade]:
    """The cascading foreign keys of the tables ``children`` ("db.table"), from
    information_schema."""
    wanted = set(children)
    cur.execute(
        "SELECT rc.CONSTRAINT_SCHEMA, rc.TABLE_NAME, rc.CONSTRAINT_NAME, rc.UNIQUE_CONSTRAINT_SCHEMA, "
        "rc.REFERENCED_TABLE_NAME, rc.DELETE_RULE, rc.UPDATE_RULE, k.REFERENCED_COLUMN_NAME "
        "FROM information_schema.REFERENTIAL_CONSTRAINTS rc JOIN information_schema.KEY_COLUMN_USAGE k "
        "ON k.CONSTRAINT_SCHEMA = rc.CONSTRAINT_SCHEMA AND k.TABLE_NAME = rc.TABLE_NAME "
        "AND k.CONSTRAINT_NAME = rc.CONSTRAINT_NAME "
        "WHERE rc.DELETE_RULE IN ('CASCADE', 'SET NULL', 'SET DEFAULT') "
        "OR rc.UPDATE_RULE IN ('CASCADE', 'SET NULL', 'SET DEFAULT') "
        "ORDER BY rc.CONSTRAINT_SCHEMA, rc.TABLE_NAME, rc.CONSTRAINT_NAME, k.ORDINAL_POSITION")
    keys: dict[tuple, list[str]] = {}
    for r in cur.fetchall():
        keys.setdefault(tuple(r[:7]), []).append(r[7])
    found = [Cascade(f"{k[0]}.{k[1]}", f"{k[3]}.{k[4]}", k[2], k[5], k[6], tuple(cols)) for k, cols in keys.items()]
    return sorted((c for c in found if c.child in wanted), key=lambda c: (c.child, c.constraint))


def by_parent(found: list[Cascade]) -> dict[str, tuple[Cascade, ...]]:
    """``found`` by parent table."""
    out: dict[str, list[Cascade]] = {}
    for c in found:
        out.setdefault(c.parent, []).append(c)
    return {p: tuple(cs) for p, cs in out.items()}
