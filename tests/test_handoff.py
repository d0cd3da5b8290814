"""Unit tests of the hand-off filter's invariants."""

from __future__ import annotations

import pytest

from cdc_core.chunking import Chunk
from cdc_core.handoff import HandoffFilter
from cdc_core.positions import BinlogPosition as P


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
