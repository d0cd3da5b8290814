"""GTID sets of both flavours (cdc_core/offset/gtid.py) against a model: a MySQL set is the
Python set of the GTIDs it holds; a MariaDB position holds, per domain, every number up to its
last. Randomised (seeded: a failure repeats) over sets of a few UUIDs, tags and numbers, so
intervals touch, overlap and nest. The text forms are those of the MySQL 8.4 manual, 19.1.3.1
"GTID Format and Storage" (``uuid:1-5:11-18``, tagged ``uuid:tag:1-5``, several UUIDs joined by
commas, newlines after them in @@gtid_executed) and the MariaDB "Global Transaction ID" page
(``domain-server-sequence``, one per domain in @@gtid_binlog_pos)."""

from __future__ import annotations

import random

import pytest

from cdc_core.offset.gtid import Gtid, GtidSet

U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
U2 = "8a94f357-aab4-11df-86ab-c80aa9429562"
U3 = "00000000-0000-0000-0000-000000000001"


def model(s: GtidSet) -> set[tuple[str, str, int]]:
    return {(g.source, g.tag, g.number) for g in s.gtids()}


def random_set(rng: random.Random) -> GtidSet:
    gtids = [Gtid(rng.choice((U1, U2, U3)), rng.randint(1, 30), rng.choice(("", "", "alpha", "b_2")))
             for _ in range(rng.randint(0, 25))]
    return GtidSet.of(*gtids)


@pytest.mark.parametrize("seed", range(300))
def test_mysql_sets_agree_with_the_model(seed):
    rng = random.Random(seed)
    a, b = random_set(rng), random_set(rng)
    assert GtidSet.parse(str(a)) == a
    assert GtidSet.parse(str(a).replace(",", ",\n").upper()) == a  # as @@gtid_executed prints it, any case
    assert model(a.union(b)) == model(a) | model(b)
    assert model(a.difference(b)) == model(a) - model(b)
    assert a.issubset(b) == (model(a) <= model(b))
    assert a.issubset(a.union(b)) and a.difference(b).issubset(a)
    for source, tag, n in [(U1, "", rng.randint(1, 31)), (U2, "alpha", rng.randint(1, 31)), *model(b)]:
        g = Gtid(source, n, tag)
        assert a.contains(g) == ((source, tag, n) in model(a))
        assert a.contains(str(g)) == a.contains(g)
        assert model(a.with_transaction(g)) == model(a) | {(source, tag, n)}


def test_mysql_text_is_the_servers_canonical_form():
    s = GtidSet.parse(f"{U2}:7, {U1}:7-18:1-5:6,{U1}:alpha:3:1-2")
    assert str(s) == f"{U1}:1-18:alpha:1-3,{U2}:7"  # adjacent intervals merged, untagged first, UUIDs in order
    assert str(GtidSet.parse(f"{U1}:5:4:tag:9")) == f"{U1}:4-5:tag:9"
    assert GtidSet.parse("") == GtidSet.parse(None) == GtidSet() and not GtidSet()
    assert str(Gtid.parse(f"{U1.upper()}:TAG:5")) == f"{U1}:tag:5"
    for bad in (f"{U1}", f"{U1}:0", f"{U1}:5-3", "not-a-uuid:1", f"{U1}:1:9bad", "1-2"):
        with pytest.raises(ValueError):
            GtidSet.parse(bad)
    for bad in ("", f"{U1}:x:y:1", "1-2-x", f"{U1}:0"):
        with pytest.raises(ValueError):
            Gtid.parse(bad)


def mariadb_model(s: GtidSet) -> dict[str, int]:
    return {d: g.number for d, g in s.domains.items()}


@pytest.mark.parametrize("seed", range(200))
def test_mariadb_positions_agree_with_the_model(seed):
    rng = random.Random(seed)

    def position() -> GtidSet:
        return GtidSet.parse(",".join(f"{rng.randint(0, 3)}-{rng.randint(1, 3)}-{rng.randint(1, 40)}"
                                      for _ in range(rng.randint(0, 4))))

    a, b = position(), position()
    assert GtidSet.parse(str(a)) == a
    ma, mb = mariadb_model(a), mariadb_model(b)
    assert mariadb_model(a.union(b)) == {d: max(ma.get(d, 0), mb.get(d, 0)) for d in {*ma, *mb}}
    assert a.issubset(b) == all(mb.get(d, 0) >= n for d, n in ma.items())
    for d in range(4):
        n = rng.randint(1, 41)
        g = Gtid(str(d), n, server=rng.randint(1, 9))
        assert a.contains(g) == (ma.get(str(d), 0) >= n)  # the server id of the GTID is not compared
        moved = a.with_transaction(g)
        assert mariadb_model(moved) == {**ma, str(d): n} and moved.domains[str(d)] == g


def test_mariadb_position_text():
    p = GtidSet.parse("1-2-5,0-1-42,0-3-40")
    assert str(p) == "0-1-42,1-2-5"  # one GTID per domain, the latest
    assert p.contains("0-9-42") and not p.contains("0-1-43") and not p.contains("2-1-1")
    with pytest.raises(ValueError):
        p.difference(p)


def test_the_forms_never_mix():
    mysql, mariadb = GtidSet.parse(f"{U1}:1-3"), GtidSet.parse("0-1-5")
    for call in (lambda: mysql.union(mariadb), lambda: mariadb.issubset(mysql), lambda: mysql.contains("0-1-2"),
                 lambda: mariadb.contains(f"{U1}:1"), lambda: GtidSet(mysql.intervals, mariadb.domains)):
        with pytest.raises(ValueError):
            call()
    assert GtidSet().union(mysql) == mysql and GtidSet().union(mariadb) == mariadb  # the empty set is either
