"""GTIDs of both flavours as one type: which transactions a server (or a checkpoint) holds.

A transaction's GTID is ``d-s-n`` on MariaDB (replication domain, server id, sequence number)
and ``uuid:n`` on MySQL (``uuid:tag:n`` for MySQL 8.4's tagged GTIDs). A :class:`GtidSet`
holds transactions in the server's own form of a set:

- MariaDB: a GTID *position* (``@@gtid_binlog_pos``, ``gtid_slave_pos``): per domain the last
  GTID. It holds every transaction of that domain up to that sequence number: MariaDB numbers a
  domain's transactions in increasing order and replicates a domain in that order.
- MySQL: a GTID *set* (``@@gtid_executed``, ``uuid:1-100:200-300,uuid2:1-7``, tagged
  ``uuid:1-5:tag:1-3``): exactly the numbers listed, per UUID and tag.

Invariants (tests/test_gtid.py, randomised against a model of plain Python sets of GTIDs):
- ``parse(str(s)) == s``; the text is the server's canonical form: UUIDs and tags lower case,
  sets ordered by UUID, then the untagged intervals, then each tag's (tags in order), intervals
  ascending and merged (adjacent ones too, as MySQL prints them).
- ``contains``, ``issubset``, ``union``, ``difference`` and ``with_transaction`` agree with
  the model: a set is the set of GTIDs it holds (MariaDB: per domain, every number up to its
  last; the server id of a position's GTID names who wrote that last one and is not compared).
- The two forms never mix: combining a MariaDB position with a MySQL set raises ``ValueError``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cdc_core.source.flavour import flavour_of

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TAG = re.compile(r"[a-z_][a-z0-9_]{0,31}")
_INTERVAL = re.compile(r"(\d+)(?:-(\d+))?")
_MARIADB = re.compile(r"(\d+)-(\d+)-(\d+)")

Source = tuple[str, str]  # (uuid, tag): tag "" when untagged


@dataclass(frozen=True, order=True)
class Gtid:
    """One transaction's GTID: MariaDB's (``source`` the domain as text, ``server`` its writer)
    or MySQL's (``source`` the UUID, ``tag`` 8.4's tag or "")."""

    source: str
    number: int
    tag: str = ""
    server: int | None = None  # MariaDB only

    @property
    def mariadb(self) -> bool:
        return self.server is not None

    @classmethod
    def parse(cls, text: str) -> Gtid:
        """``d-s-n`` or ``uuid[:tag]:n``; ValueError for anything else."""
        t = text.strip().lower()
        if m := _MARIADB.fullmatch(t):
            return cls(str(int(m[1])), int(m[3]), server=int(m[2]))
        parts = t.split(":")
        if len(parts) in (2, 3) and _UUID.fullmatch(parts[0]) and parts[-1].isdigit() and int(parts[-1]) > 0 \
                and (len(parts) == 2 or _TAG.fullmatch(parts[1])):
            return cls(parts[0], int(parts[-1]), parts[1] if len(parts) == 3 else "")
        raise ValueError(f"not a GTID: {text!r} (MariaDB: domain-server-sequence; MySQL: uuid:number or "
                         "uuid:tag:number)")

    def __str__(self) -> str:
        if self.mariadb:
            return f"{self.source}-{self.server}-{self.number}"
        return f"{self.source}:{self.tag}:{self.number}" if self.tag else f"{self.source}:{self.number}"


@dataclass(frozen=True)
class GtidSet:
    """Transactions named by GTID, in either flavour's form (see the module docstring)."""

    # MySQL: (uuid, tag) -> merged, ascending inclusive intervals
    intervals: dict[Source, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    # MariaDB: domain -> its last GTID
    domains: dict[str, Gtid] = field(default_factory=dict)

    def __post_init__(self):
        if self.intervals and self.domains:
            raise ValueError("a GTID set is MariaDB's or MySQL's, not both")

    @property
    def mariadb(self) -> bool | None:
        """True for a MariaDB position, False for a MySQL set, None when empty (either)."""
        return True if self.domains else False if self.intervals else None

    @classmethod
    def parse(cls, text: str | None) -> GtidSet:
        """A set as the server prints it (``@@gtid_executed`` holds newlines after its commas);
        "" and None are the empty set. ValueError names what cannot be read."""
        items = [i.strip() for i in (text or "").lower().replace("\n", "").split(",") if i.strip()]
        if not items:
            return cls()
        if all(_MARIADB.fullmatch(i) for i in items):
            domains: dict[str, Gtid] = {}
            for g in map(Gtid.parse, items):
                if g.source in domains and domains[g.source].number >= g.number:
                    continue
                domains[g.source] = g
            return cls(domains=domains)
        found: dict[Source, list[tuple[int, int]]] = {}
        for item in items:
            parts = item.split(":")
            if not _UUID.fullmatch(parts[0]) or len(parts) < 2:
                raise ValueError(f"not a GTID set: {text!r} ({item!r} is neither uuid:intervals nor "
                                 "domain-server-sequence)")
            tag = ""
            for part in parts[1:]:
                if m := _INTERVAL.fullmatch(part):
                    lo, hi = int(m[1]), int(m[2] or m[1])
                    if lo < 1 or hi < lo:
                        raise ValueError(f"not a GTID set: {text!r} (interval {part!r})")
                    found.setdefault((parts[0], tag), []).append((lo, hi))
                elif _TAG.fullmatch(part):
                    tag = part
                else:
                    raise ValueError(f"not a GTID set: {text!r} ({part!r} is neither an interval nor a tag)")
        return cls({s: _merged(iv) for s, iv in found.items()})

    @classmethod
    def of(cls, *gtids: Gtid | str) -> GtidSet:
        """The set holding these transactions (MariaDB: up to each)."""
        out = cls()
        for g in gtids:
            out = out.with_transaction(g)
        return out

    def __bool__(self) -> bool:
        return bool(self.intervals or self.domains)

    def contains(self, gtid: Gtid | str) -> bool:
        """Whether the transaction ``gtid`` is in the set."""
        g = Gtid.parse(gtid) if isinstance(gtid, str) else gtid
        self._same_form(g.mariadb)
        if g.mariadb:
            last = self.domains.get(g.source)
            return last is not None and last.number >= g.number
        return any(lo <= g.number <= hi for lo, hi in self.intervals.get((g.source, g.tag), ()))

    def issubset(self, other: GtidSet) -> bool:
        """Whether every transaction of this set is in ``other``."""
        self._same_form(other.mariadb)
        if self.domains:
            return all(d in other.domains and other.domains[d].number >= g.number for d, g in self.domains.items())
        return all(_covered(iv, other.intervals.get(s, ())) for s, iv in self.intervals.items())

    def union(self, other: GtidSet) -> GtidSet:
        """The transactions of either set."""
        self._same_form(other.mariadb)
        if self.domains or other.domains:
            domains = dict(self.domains)
            for d, g in other.domains.items():
                if d not in domains or domains[d].number < g.number:
                    domains[d] = g
            return GtidSet(domains=domains)
        sources = {*self.intervals, *other.intervals}
        return GtidSet({s: _merged([*self.intervals.get(s, ()), *other.intervals.get(s, ())]) for s in sources})

    def difference(self, other: GtidSet) -> GtidSet:
        """MySQL: the transactions of this set not in ``other`` (MariaDB positions hold prefixes
        of domains, whose differences are no position: ValueError)."""
        self._same_form(other.mariadb)
        if self.domains:
            raise ValueError("a MariaDB GTID position has no difference")
        out = {}
        for s, iv in self.intervals.items():
            left = _minus(iv, other.intervals.get(s, ()))
            if left:
                out[s] = left
        return GtidSet(out)

    def with_transaction(self, gtid: Gtid | str) -> GtidSet:
        """The set once transaction ``gtid`` is applied too: MySQL adds it; MariaDB's position in
        its domain moves to it (where a replica that applied it resumes after it)."""
        g = Gtid.parse(gtid) if isinstance(gtid, str) else gtid
        self._same_form(g.mariadb)
        if g.mariadb:
            return GtidSet(domains={**self.domains, g.source: g})
        return self.union(GtidSet({(g.source, g.tag): ((g.number, g.number),)}))

    def gtids(self) -> list[Gtid]:
        """MySQL: every transaction of the set, in the set's order (small sets only: tests, messages)."""
        return [Gtid(u, n, t) for (u, t), iv in sorted(self.intervals.items()) for lo, hi in iv
                for n in range(lo, hi + 1)]

    def _same_form(self, mariadb: bool | None) -> None:
        mine = self.mariadb
        if mine is not None and mariadb is not None and mine != mariadb:
            raise ValueError("a MariaDB GTID and a MySQL GTID set cannot be compared")

    def __str__(self) -> str:
        if self.domains:
            return ",".join(str(self.domains[d]) for d in sorted(self.domains, key=int))
        out = []
        for uuid in sorted({u for u, _ in self.intervals}):
            parts = [uuid]
            for tag in sorted(t for u, t in self.intervals if u == uuid):
                if tag:
                    parts.append(tag)
                parts += [f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in self.intervals[(uuid, tag)]]
            out.append(":".join(parts))
        return ",".join(out)


def _merged(intervals) -> tuple[tuple[int, int], ...]:
    """Ascending intervals with overlapping and adjacent ones joined."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def _covered(inner, outer) -> bool:
    """Whether every interval of ``inner`` lies in one of ``outer`` (both merged)."""
    return all(any(a <= lo and hi <= b for a, b in outer) for lo, hi in inner)


def _minus(intervals, removed) -> tuple[tuple[int, int], ...]:
    out = []
    for lo, hi in intervals:
        for a, b in removed:
            if b < lo or a > hi:
                continue
            if a > lo:
                out.append((lo, a - 1))
            lo = b + 1
            if lo > hi:
                break
        if lo <= hi:
            out.append((lo, hi))
    return tuple(out)


def server_gtids(cursor) -> GtidSet:
    """What the server's binlog holds by GTID (MariaDB ``@@GLOBAL.gtid_binlog_pos``, MySQL
    ``@@GLOBAL.gtid_executed``: cdc_core/source/flavour.py)."""
    cursor.execute(f"SELECT @@GLOBAL.{flavour_of(cursor).gtid_position_variable}")
    return GtidSet.parse(cursor.fetchone()[0])


def server_purged(cursor) -> GtidSet:
    """MySQL's executed transactions that no binlog holds any more (``@@GLOBAL.gtid_purged``);
    empty on MariaDB, which keeps no such set."""
    variable = flavour_of(cursor).gtid_purged_variable
    if variable is None:
        return GtidSet()
    cursor.execute(f"SELECT @@GLOBAL.{variable}")
    return GtidSet.parse(cursor.fetchone()[0])
