"""The server's order of chunk-key values: which range of a partition holds each key.

Chunks are planned and read by the server: a chunk holds the rows with
``lo <= k AND k < hi`` as the server compares them, in the key column's collation.
Whoever asks which chunk holds a key (the hand-off filter, the chunk reader folding
its binlog window) must compare the same way. A :class:`KeyOrder` does, for one
column; its :class:`Partition` over sorted bounds answers, for a batch of values, how
many bounds lie at or below each value (0: below the first bound; with the chunk
lower bounds, the chunk index).

How a column is ordered (:meth:`KeyOrders.for_column`):

- **No collation** (integers, decimals, floats, dates and times, binary strings, BIT,
  INET4, INET6, UUID) **or ordered by number** (ENUM, SET): Python orders each value's
  codec ``key_sort_key`` as the server's index does; no round trip. A sort key takes a
  canonical value and a bound as the server returned it alike: TIMESTAMP values compare as
  naive UTC (the planner's session is UTC), DECIMAL text (more than 38 digits) as
  ``Decimal``, TIME as microseconds, BIT as its number, INET4/INET6/UUID as the bytes the
  server stores (a UUID's groups reversed for versions 1-5), ENUM and SET as the member's
  index and the set's bits (cdc_core/types/enum_set.py).
- **A collation whose sort keys model its comparisons** (checked once per collation on
  :data:`PROBES`: case, accents, ß/ss, æ/ae, trailing spaces, tabs and control
  characters, the empty string, supplementary characters): the server's sort keys,
  ``WEIGHT_STRING(CONVERT(v USING charset) COLLATE collation)``, fetched for the bounds
  once and for a batch of values in one query, compared as bytes level by level
  (``LEVEL n`` for the multi-level UCA 14.0 collations). Under PAD SPACE a shorter
  weight string compares as if padded with the space's weight, so ``'a' = 'a '`` and
  ``'a\\t' < 'a'``, as the server has it; NO PAD compares the weights as they are.
- **Any other collation** (one whose ``WEIGHT_STRING`` disagrees with its own
  comparisons, such as the ``*_nopad_ai_cs`` UCA 14.0 collations and
  ``cp1250_czech_cs``): the server counts, for each value of a batch, the bounds at or
  below it (one query per batch, the bounds sent with it).

Measured once on MariaDB 10.11 (outside the suite): the probes accept the sort keys of
1,125 of its 1,241 collations and reject the other 116 (every ``*_nopad_ai_cs`` UCA 14.0
collation and ``cp1250_czech_cs``), exactly those whose sort keys misorder pairs of a
larger adversarial set of 68 strings.

Why sort keys rather than asking the server which chunk holds a key: a partition
fetches its bounds' sort keys once, and a batch of keys costs one small query (its size
grows with the keys, not with the number of chunks), then a binary search here.

Invariants (tested in tests/test_handoff_collations.py against the server's index-order
``ORDER BY`` and its ``<=`` per collation, and against the planner's chunks for string,
composite and non-string keys; in tests/test_chunk_key_types.py for every other key type;
the pure comparison in tests/test_handoff.py):
- ``Partition.locate(values)[i]`` is the number of bounds ``b`` with ``b <= values[i]``
  by the server's comparison in the column's collation.
- A collation's sort keys are used only if they order :data:`PROBES` as the server's
  ``STRCMP`` does.
- ``locate`` sends at most one query per :data:`BATCH` distinct values, none for a
  column without a collation; a partition fetches its bounds' sort keys once.
"""

from __future__ import annotations

import contextlib
import logging
import re
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cmp_to_key, partial
from typing import Protocol

import pymysql

from cdc_core.retry import RetryPolicy, retrying
from cdc_core.schema.table import Column
from cdc_core.types.registry import codec_for

log = logging.getLogger(__name__)

BATCH = 1000  # values per query

# A collation's sort keys are trusted only if they order these as its own comparisons do.
PROBES = ("", " ", "  ", "a", "A", "a ", "A ", "a\t", "a\x01", "á", "Á", "ä", "a\u0301", "ae", "æ", "ß", "ss", "SS",
          "s", "ch", "h", "cz", "ö", "oe", "ø", "z", "ﬃ", "ffi", "😀", "😁", "_", "-", "0", "10", "9")
_LEVEL_PROBE = "Aá ß"  # differs at every level: letters, accents, case
_MAX_LEVELS = 6  # MariaDB's WEIGHT_STRING levels
_LOST_CONNECTION = {2006, 2013}  # MySQL server has gone away / lost connection during query


class Sql(Protocol):
    """Runs queries on the source server."""

    def rows(self, sql: str, params: Sequence[object]) -> list[tuple]:
        """The rows of ``sql`` with ``params`` bound to its ``%s`` placeholders."""
        ...

    def close(self) -> None:
        """Release the connection (a later query makes a new one)."""
        ...


class ServerSql:
    """:class:`Sql` over a pymysql connection made on first use. On a connection it made, a
    query that meets a fault that passes (the connection lost between or during queries, the
    server restarting) is made again on a new connection, with backoff, until ``policy``'s
    budget is spent (tests/test_control_faults.py); on one someone else owns, a connection lost
    between queries is made again once (its owner retries the rest)."""

    def __init__(self, open_connection: Callable[[], pymysql.connections.Connection], owned: bool = True,
                 policy: RetryPolicy | None = None):
        self._open = open_connection
        self._owned = owned
        self._policy = policy or RetryPolicy()
        self._conn: pymysql.connections.Connection | None = None

    @classmethod
    def on(cls, conn: pymysql.connections.Connection) -> ServerSql:
        """Over a connection someone else owns (and closes)."""
        return cls(lambda: conn, owned=False)

    def rows(self, sql: str, params: Sequence[object]) -> list[tuple]:
        """The rows of ``sql`` with ``params`` bound to its ``%s`` placeholders."""
        if self._owned:
            return retrying("ordering key values on the source", lambda: self._attempt(sql, params), self._policy)
        if self._conn is None:
            self._conn = self._open()
        try:
            return self._run(sql, params)
        except (pymysql.err.OperationalError, pymysql.err.InterfaceError) as e:
            if isinstance(e, pymysql.err.OperationalError) and e.args[0] not in _LOST_CONNECTION:
                raise
            self._conn.ping(reconnect=True)
            return self._run(sql, params)

    def _attempt(self, sql: str, params: Sequence[object]) -> list[tuple]:
        if self._conn is None:
            self._conn = self._open()
        try:
            return self._run(sql, params)
        except Exception:
            self.close()  # maybe half-broken (cut mid-packet): never used again
            raise

    def _run(self, sql: str, params: Sequence[object]) -> list[tuple]:
        with self._conn.cursor() as cur:
            cur.execute(sql, list(params))
            return list(cur.fetchall())

    def close(self) -> None:
        """Close the connection if this made it (a later query makes a new one)."""
        if self._conn is not None and self._owned:
            with contextlib.suppress(pymysql.err.Error):
                self._conn.close()
        self._conn = None


class Partition(Protocol):
    """Sorted bounds of one column, in the server's order."""

    remote: bool  # whether locate() may query the server (callers cache its answers)

    def locate(self, values: Sequence[object]) -> list[int]:
        """For each value, the number of bounds at or below it."""
        ...


class KeyOrder(Protocol):
    """The server's order of one column's values."""

    def partition(self, bounds: Sequence[object]) -> Partition:
        """A partition over ``bounds``, which are in ascending server order."""
        ...


# --- columns without a collation: Python order ------------------------------------------------

@dataclass(frozen=True)
class PythonOrder:
    """Columns whose values Python orders as the server does, through their codec's
    ``key_sort_key`` (a TIMESTAMP as naive UTC, an ENUM by its member's index...); None: the
    values as they are."""

    column: Column | None = None
    sort_key: Callable[[object], object] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        key = (lambda v: v) if self.column is None else partial(codec_for(self.column).key_sort_key, self.column)
        object.__setattr__(self, "sort_key", key)

    def partition(self, bounds: Sequence[object]) -> PythonPartition:
        return PythonPartition(self, [self.sort_key(b) for b in bounds])


@dataclass(frozen=True)
class PythonPartition:
    order: PythonOrder
    keys: list
    remote = False

    def locate(self, values: Sequence[object]) -> list[int]:
        return [bisect_right(self.keys, self.order.sort_key(v)) for v in values]


# --- collations: the server's sort keys, or the server's comparisons --------------------------

@dataclass(frozen=True)
class Collation:
    """One collation and how to fetch and compare its sort keys."""

    name: str
    levels: int = 1  # 1: the whole WEIGHT_STRING; n > 1: WEIGHT_STRING(... LEVEL k) for k = 1..n
    pads: tuple[bytes | None, ...] = (None,)  # per level: the space's weight under PAD SPACE, else None

    def __post_init__(self):
        if not re.fullmatch(r"[A-Za-z0-9_]+", self.name):
            raise ValueError(f"not a collation name: {self.name!r}")

    @property
    def charset(self) -> str:
        # Collation names start with their charset's name, and no charset name holds a '_'.
        return self.name.split("_", 1)[0]

    @property
    def value_sql(self) -> str:
        # The value in the column's own charset: MariaDB weighs a string in its charset, and
        # a latin1 collation cannot apply to the connection's utf8mb4 text.
        return f"CONVERT(%s USING {self.charset}) COLLATE {self.name}"

    @property
    def weight_sql(self) -> list[str]:
        """Expressions giving one value's sort key, one per level."""
        if self.levels == 1:
            return [f"WEIGHT_STRING({self.value_sql})"]
        return [f"WEIGHT_STRING({self.value_sql} LEVEL {k})" for k in range(1, self.levels + 1)]


def compare_weights(a: Sequence[bytes], b: Sequence[bytes], pads: Sequence[bytes | None]) -> int:
    """-1, 0 or 1 as sort keys ``a`` and ``b`` (weights per level) compare: level by level,
    bytewise; under PAD SPACE (a pad weight for the level) the shorter weight string is
    first padded with the space's weight, as the server pads the shorter string."""
    for x, y, pad in zip(a, b, pads, strict=True):
        if pad and len(x) != len(y):
            n = max(len(x), len(y))
            x = x + pad * -(-(n - len(x)) // len(pad))
            y = y + pad * -(-(n - len(y)) // len(pad))
        if x != y:
            return -1 if x < y else 1
    return 0


def _distinct(values: Sequence[object]) -> list[object]:
    return list(dict.fromkeys(values))


def _weights(sql: Sql, coll: Collation, values: Sequence[object]) -> dict[object, tuple[bytes, ...]]:
    """Weights per level of each value: one query per BATCH distinct values."""
    exprs = coll.weight_sql
    n = len(exprs)
    out: dict[object, tuple[bytes, ...]] = {}
    distinct = _distinct(values)
    for i in range(0, len(distinct), BATCH):
        part = distinct[i:i + BATCH]
        row = sql.rows("SELECT " + ", ".join(e for _ in part for e in exprs), [v for v in part for _ in exprs])[0]
        out.update((v, tuple(row[j * n:(j + 1) * n])) for j, v in enumerate(part))
    return out


@dataclass(frozen=True)
class WeightOrder:
    """A collation ordered by the server's sort keys, compared here."""

    sql: Sql
    collation: Collation

    def partition(self, bounds: Sequence[object]) -> WeightPartition:
        weights = _weights(self.sql, self.collation, bounds)
        return WeightPartition(self, [weights[b] for b in bounds])


class WeightPartition:
    """Bounds as byte-comparable keys. Each PAD SPACE level is padded with the space's weight
    to the bounds' longest weight string at that level; a value's longer weight string is cut
    there and followed by how its tail compares with spaces, which is what decides between it
    and a bound it equals up to the cut. So plain tuple comparison gives
    :func:`compare_weights` against every bound."""

    remote = True

    def __init__(self, order: WeightOrder, bound_weights: list[tuple[bytes, ...]]):
        self.order = order
        levels = order.collation.levels
        self._lengths = [max((len(w[k]) for w in bound_weights), default=0) for k in range(levels)]
        self.keys = [self._key(w) for w in bound_weights]

    def _key(self, weights: tuple[bytes, ...]) -> tuple:
        key: list = []
        for w, pad, n in zip(weights, self.order.collation.pads, self._lengths, strict=True):
            if pad is None:
                key += (w, 0)
            elif len(w) <= n:
                key += ((w + pad * -(-(n - len(w)) // len(pad)))[:n], 0)
            else:
                key += (w[:n], compare_weights((w[n:],), (b"",), (pad,)))
        return tuple(key)

    def locate(self, values: Sequence[object]) -> list[int]:
        weights = _weights(self.order.sql, self.order.collation, values)
        return [bisect_right(self.keys, self._key(weights[v])) for v in values]


@dataclass(frozen=True)
class ComparisonOrder:
    """A collation whose sort keys do not model its comparisons: the server compares."""

    sql: Sql
    collation: Collation

    def partition(self, bounds: Sequence[object]) -> ComparisonPartition:
        return ComparisonPartition(self, list(bounds))


@dataclass(frozen=True)
class ComparisonPartition:
    order: ComparisonOrder
    bounds: list
    remote = True

    def locate(self, values: Sequence[object]) -> list[int]:
        if not self.bounds:
            return [0] * len(values)
        v = self.order.collation.value_sql
        found: dict[object, int] = {}
        distinct = _distinct(values)
        for i in range(0, len(distinct), BATCH):
            part = distinct[i:i + BATCH]
            keys = " UNION ALL ".join(f"SELECT {j} AS i, {v} AS k" for j in range(len(part)))
            bounds = " UNION ALL ".join(f"SELECT {v} AS b" for _ in self.bounds)
            rows = self.order.sql.rows(
                f"SELECT v.i, COUNT(x.b) FROM ({keys}) v LEFT JOIN ({bounds}) x ON x.b <= v.k GROUP BY v.i",
                [*part, *self.bounds])
            found.update((part[j], int(n)) for j, n in rows)
        return [found[v] for v in values]


def discover(sql: Sql, name: str) -> tuple[Collation, bool]:
    """How collation ``name``'s sort keys are fetched and compared, and whether they order
    :data:`PROBES` exactly as the server's comparisons do."""
    plain = Collation(name)
    v = plain.value_sql
    pad_space, = sql.rows(f"SELECT {v} = {v}", ["a", "a "])[0]
    levels = _levels(sql, plain)
    unpadded = Collation(name, levels, (None,) * levels)
    coll = Collation(name, levels, _weights(sql, unpadded, [" "])[" "]) if pad_space else unpadded
    # Sorted by their sort keys, the probes must be in the server's order pair by pair (and
    # equal exactly where the server says so); the server's order is total, so then it agrees
    # on every pair.
    weights = _weights(sql, coll, PROBES)
    ranked = sorted(PROBES, key=cmp_to_key(lambda a, b: compare_weights(weights[a], weights[b], coll.pads)))
    pairs = list(zip(ranked, ranked[1:]))
    truth = sql.rows("SELECT " + ", ".join(f"STRCMP({v}, {v})" for _ in pairs), [s for p in pairs for s in p])[0]
    modelled = all(compare_weights(weights[a], weights[b], coll.pads) == t
                   for (a, b), t in zip(pairs, truth, strict=True))
    return coll, modelled


def _levels(sql: Sql, coll: Collation) -> int:
    """How many WEIGHT_STRING levels make up the collation's sort key: the fewest whose
    concatenation is the whole weight string (1 for single-level collations)."""
    v = coll.value_sql
    try:
        row = sql.rows("SELECT " + ", ".join([f"WEIGHT_STRING({v})"] + [f"WEIGHT_STRING({v} LEVEL {k})"
                                                                          for k in range(1, _MAX_LEVELS + 1)]),
                       [_LEVEL_PROBE] * (_MAX_LEVELS + 1))[0]
    except pymysql.err.ProgrammingError:
        # A server without the LEVEL clause (MySQL 8.0): whole weight strings, which the
        # probes then accept or not like any other.
        return 1
    whole, per_level = row[0], row[1:]
    for k in range(1, _MAX_LEVELS + 1):
        if b"".join(per_level[:k]) == whole:
            return k
    return 1


class KeyOrders:
    """Key orders of columns on one server, each collation looked up once."""

    def __init__(self, sql: Sql):
        self.sql = sql
        self._collations: dict[str, KeyOrder] = {}

    def for_column(self, column: Column) -> KeyOrder:
        """The server's order of ``column``'s values."""
        if column.collation is None or codec_for(column).ordinal_keys:
            return PythonOrder(column)
        order = self._collations.get(column.collation)
        if order is None:
            coll, modelled = discover(self.sql, column.collation)
            if modelled:
                order = WeightOrder(self.sql, coll)
            else:
                log.info("collation %s: its sort keys do not order strings as its comparisons do; "
                         "chunk keys in it are compared by the server, one query per batch", coll.name)
                order = ComparisonOrder(self.sql, coll)
            self._collations[column.collation] = order
        return order

    def locator(self, column: Column, bounds: Sequence[object]) -> Callable[[Sequence[object]], list[int]]:
        """For values of ``column`` in binlake's canonical form (as Delta holds them), the number
        of ``bounds`` (chunk bounds as the server returned them, ascending) at or below each, in
        the server's order; an order that asks the server does so once per distinct value."""
        partition = self.for_column(column).partition(bounds)

        def locate(values: Sequence[object]) -> list[int]:
            if not partition.remote:
                return partition.locate(values)
            distinct = list(dict.fromkeys(values))
            found = dict(zip(distinct, partition.locate(distinct), strict=True))
            return [found[v] for v in values]

        return locate

    def close(self) -> None:
        """Release the server connection."""
        self.sql.close()
