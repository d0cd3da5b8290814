"""Unit tests of the hand-off filter's invariants and of the pure parts of the key order
(tests against the server: tests/test_handoff_collations.py)."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from functools import cmp_to_key

import pytest

from cdc_core.chunks.handoff import HandoffFilter
from cdc_core.chunks.planning import Chunk
from cdc_core.offset.position import BinlogPosition as P
from cdc_core.schema.table import Column
from cdc_core.types.enum_set import Ordinal
from cdc_core.types.key_order import Collation, PythonOrder, WeightOrder, compare_weights


def _chunks(bounds):
    edges = [None, *bounds, None]
    return [Chunk("d.t", i, "id", edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def test_chunk_for_respects_half_open_ranges():
    f = HandoffFilter(_chunks([10, 20, 30]), {i: P("b.000001", 100 + i) for i in range(4)})
    assert [f.chunk_for(k).index for k in (-5, 9, 10, 19, 20, 29, 30, 10**12)] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_drop_iff_at_or_before_chunk_high_watermark():
    hws = {0: P("b.000001", 500), 1: P("b.000002", 40), 2: P("b.000001", 900)}
    f = HandoffFilter(_chunks([100, 200]), hws)
    assert f.should_drop(5, P("b.000001", 500))  # at HW: already in the chunk
    assert not f.should_drop(5, P("b.000001", 501))
    assert f.should_drop(150, P("b.000001", 99999))  # an earlier file is before HW whatever the offset
    assert not f.should_drop(150, P("b.000002", 41))
    assert not f.should_drop(250, P("b.000003", 1))  # past every HW: no filtering
    assert f.max_high_watermark == P("b.000002", 40)


def test_incomplete_snapshot_is_refused():
    with pytest.raises(ValueError, match="not complete"):
        HandoffFilter(_chunks([5]), {0: P("b.000001", 4)})


def test_positions_order_across_rotation():
    assert P("binlog.000009", 999999) < P("binlog.000010", 4)
    assert P("binlog.000010", 4).seq(3) > P("binlog.000009", 999999).seq(4095)


def test_drops_answers_a_row_event_at_once():
    hws = {0: P("b.000001", 100), 1: P("b.000001", 300), 2: P("b.000001", 200)}
    f = HandoffFilter(_chunks([10, 20]), hws)
    keys = [5, 15, 25, 10, 20]
    assert f.drops(keys, P("b.000001", 250)) == [False, True, False, True, False]
    assert f.drops(keys, P("b.000001", 100)) == [True] * 5  # at or before the lowest HW: in every chunk
    assert f.drops(keys, P("b.000001", 301)) == [False] * 5
    assert [f.should_drop(k, P("b.000001", 250)) for k in keys] == f.drops(keys, P("b.000001", 250))
    assert f.drops([], P("b.000001", 250)) == []


def test_python_order_compares_canonical_values_with_planned_bounds():
    """The stream's canonical values against bounds as the planner read them: TIMESTAMP
    aware UTC against naive UTC, DECIMAL(p > 38) text against Decimal, TIME microseconds
    against timedelta, BIT bytes and bools against the server's bytes, ENUM and SET text
    against member numbers (Ordinal), UUID and INET6 text by their stored bytes."""
    ts = PythonOrder(Column("k", "timestamp", "timestamp")).partition([dt.datetime(2021, 1, 1, 12)])
    assert ts.locate([dt.datetime(2021, 1, 1, 11, 59, tzinfo=dt.UTC), dt.datetime(2021, 1, 1, 12, tzinfo=dt.UTC),
                      dt.datetime(2021, 1, 1, 13, tzinfo=dt.timezone(dt.timedelta(hours=2)))]) == [0, 1, 0]
    dec = PythonOrder(Column("k", "decimal", "decimal(60,3)", precision=60, scale=3)).partition(
        [Decimal("-10.5"), Decimal("9")])
    assert dec.locate(["-100.000", "-10.500", "10.00", "9"]) == [0, 1, 2, 2]
    time = PythonOrder(Column("k", "time", "time")).partition([-dt.timedelta(hours=1), dt.timedelta(seconds=1)])
    assert time.locate([-3_600_000_001, -3_600_000_000, 999_999, 1_000_000]) == [0, 1, 1, 2]
    bit = PythonOrder(Column("k", "bit", "bit(10)", precision=10)).partition([b"\x01\x00"])
    assert bit.locate([b"\x00\xff", b"\x01\x00", b"\x02\x00"]) == [0, 1, 1]
    assert PythonOrder(Column("k", "bit", "bit(1)", precision=1)).partition([b"\x01"]).locate([False, True]) == [0, 1]
    enum = PythonOrder(Column("k", "enum", "enum('b','a','c?')")).partition([Ordinal(2), Ordinal(3)])
    assert enum.locate(["", "b", "a", "c😀", "c?"]) == [0, 0, 1, 2, 2]  # '?': as information_schema shows 😀
    sets = PythonOrder(Column("k", "set", "set('b','a','d')")).partition([Ordinal(2), Ordinal(4)])
    assert sets.locate(["", "b", "a", "b,a", "d", "b,d"]) == [0, 0, 1, 1, 2, 2]
    uuid = PythonOrder(Column("k", "uuid", "uuid")).partition(["10000000-0000-0000-0000-000000000000"])
    # Version 1 with the RFC variant is stored node first (00...), so below the version-0 bound
    # stored as written (10...), though its text sorts above it.
    assert uuid.locate(["ffffffff-0000-1000-8000-000000000000", "10000000-0000-0000-0000-000000000000",
                        "20000000-0000-0000-0000-000000000000"]) == [0, 1, 1]
    inet6 = PythonOrder(Column("k", "inet6", "inet6")).partition(["::ffff:1.2.3.4"])
    assert inet6.locate(["::1.2.3.4", "::ffff:1.2.3.4", "2001:db8::", "::ffff:0.0.0.1"]) == [0, 1, 1, 0]


@pytest.mark.parametrize("a,b,pads,want", [
    ((b"\x00\x41",), (b"\x00\x41\x00\x20",), (b"\x00\x20",), 0),  # PAD SPACE: 'a' = 'a '
    ((b"\x00\x41\x00\x09",), (b"\x00\x41",), (b"\x00\x20",), -1),  # 'a\t' < 'a' (tab below the pad)
    ((b"\x00\x41",), (b"\x00\x41\x00\x09",), (None,), -1),  # NO PAD: a prefix sorts first
    ((b"",), (b"\x00\x20\x00\x20",), (b"\x00\x20",), 0),  # '' = '  '
    ((b"\x20\x75", b"\x00\x20"), (b"\x20\x75", b"\x00\x24"), (b"\x02\x09", b"\x00\x20"), -1),  # level 2 decides
    ((b"\x20\x75", b"\x00\x24"), (b"\x20\x76", b"\x00\x20"), (b"\x02\x09", b"\x00\x20"), -1),  # level 1 first
])
def test_sort_keys_compare_level_by_level_padded_under_pad_space(a, b, pads, want):
    assert compare_weights(a, b, pads) == want
    assert compare_weights(b, a, pads) == -want


class _CannedWeights:
    """Answers the sort-key queries of a one-level collation from a table of weights (the
    pure part of the order, without a server)."""

    def __init__(self, weights: dict[str, bytes]):
        self.weights = weights

    def rows(self, sql: str, params):
        assert sql.count("WEIGHT_STRING") == len(params)
        return [tuple(self.weights[p] for p in params)]

    def close(self):
        pass


@pytest.mark.parametrize("pad", [b"\x00\x20", None])
def test_partition_by_sort_keys_agrees_with_compare_weights(pad):
    """Bounds and values of random weights (units below, at and above the space's, of
    different lengths): each value's rank is the count of bounds compare_weights puts at or
    below it, whichever is longer."""
    rng = random.Random(4)
    units = [b"\x00\x09", b"\x00\x20", b"\x00\x41", b"\x00\x42"]
    weights = {f"v{i}": b"".join(rng.choice(units) for _ in range(rng.randrange(0, 6))) for i in range(300)}
    coll = Collation("utf8mb4_general_ci", 1, (pad,))
    cmp = cmp_to_key(lambda a, b: compare_weights((weights[a],), (weights[b],), coll.pads))
    ranked = sorted(weights, key=cmp)
    bounds = []  # distinct and ascending, as planned bounds are; shorter than many values
    for v in [v for v in ranked if len(weights[v]) <= 4][::3]:
        if not bounds or compare_weights((weights[bounds[-1]],), (weights[v],), coll.pads) < 0:
            bounds.append(v)
    partition = WeightOrder(_CannedWeights(weights), coll).partition(bounds)
    want = [sum(compare_weights((weights[b],), (weights[v],), coll.pads) <= 0 for b in bounds) for v in weights]
    assert partition.locate(list(weights)) == want
