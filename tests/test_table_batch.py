"""Invariants of cdc_core/batch/table_batch.py, cdc_core/offset/stream_offset.py and cdc_core/lifecycle.py,
tested directly: a batch's plan applied to the table before it gives the table after
it; offsets skip exactly what was applied; only allowed lifecycle transitions."""

from __future__ import annotations

import random

import pytest

from cdc_core.batch.table_batch import TableBatch
from cdc_core.chunks.handoff import HandoffFilter
from cdc_core.chunks.planning import Chunk
from cdc_core.lifecycle import Lifecycle, State
from cdc_core.offset.position import BinlogPosition
from cdc_core.offset.stream_offset import SkipFilter, StreamOffset, position_key_of_version
from cdc_core.schema.table import Column, TableSchema

SCHEMA = TableSchema("d", "t", (Column("id", "int", "int(11)"), Column("v", "int", "int(11)")), ("id",))


def _apply(table: dict, plan) -> dict:
    out = dict(table)
    for row in plan.delete:
        out.pop(row[0], None)  # MERGE: deleting an absent key is a no-op
    for row in plan.append:
        assert row[0] not in out, "appended a key that exists"
        out[row[0]] = row[1]
    for row in plan.upsert:
        out[row[0]] = row[1]
    return out


def _random_events(rng: random.Random, table: dict, n: int):
    """Random valid row events against ``table`` (mutated as MySQL would)."""
    events = []
    for i in range(n):
        pos = BinlogPosition("binlog.000001", 1000 + 100 * i)
        r = rng.random()
        if r < 0.35 or not table:
            k = rng.randrange(60)
            if k in table:
                continue
            table[k] = rng.randrange(1000)
            events.append(("c", [(k, table[k])], pos))
        elif r < 0.7:
            k = rng.choice(list(table))
            before = (k, table[k])
            table[k] = rng.randrange(1000)
            events.append(("u", [(before, (k, table[k]))], pos))
        elif r < 0.85:
            k = rng.choice(list(table))
            new = rng.randrange(60)
            if new in table:
                continue
            before = (k, table.pop(k))
            table[new] = before[1]
            events.append(("u", [(before, (new, before[1]))], pos))
        else:
            k = rng.choice(list(table))
            events.append(("d", [(k, table.pop(k))], pos))
    return events


@pytest.mark.parametrize("seed", range(30))
def test_plan_applied_to_before_gives_after(seed):
    rng = random.Random(seed)
    before = {k: k for k in rng.sample(range(60), 25)}
    after = dict(before)
    events = _random_events(rng, after, 80)
    batch = TableBatch(SCHEMA)
    for op, rows, pos in events:
        batch.add_event(op, rows, pos)
    assert _apply(before, batch.plan()) == after


def test_last_image_wins_and_keeps_op_and_seq():
    batch = TableBatch(SCHEMA)
    p1, p2, p3 = (BinlogPosition("binlog.000002", p) for p in (200, 300, 400))
    batch.add_event("c", [(1, 10), (2, 20)], p1)
    batch.add_event("u", [((1, 10), (1, 11))], p2)
    batch.add_event("d", [(2, 20)], p3)
    plan = batch.plan()
    assert plan.append == [(1, 11, "u", p2.seq(0))]  # key new to Delta: appended, no lookup
    assert plan.upsert == [] and plan.delete == []  # key 2 was inserted and deleted in the batch
    assert batch.changes == {"c": 2, "u": 1, "d": 1}  # the binlog's row changes, before folding


def test_changes_count_every_row_also_those_folding_to_nothing():
    batch = TableBatch(SCHEMA)
    p1, p2 = BinlogPosition("binlog.000002", 200), BinlogPosition("binlog.000002", 300)
    batch.add_event("c", [(1, 10), (2, 20)], p1)
    batch.add_event("d", [(1, 10), (2, 20)], p2)
    assert batch.plan().empty and batch.changes == {"c": 2, "u": 0, "d": 2}


def test_handoff_drop_judges_each_image_by_its_chunk():
    chunks = [Chunk("d.t", 0, "id", None, 10), Chunk("d.t", 1, "id", 10, None)]
    hw = {0: BinlogPosition("binlog.000001", 500), 1: BinlogPosition("binlog.000001", 100)}
    f = HandoffFilter(chunks, hw)
    batch = TableBatch(SCHEMA, f.should_drop, "id")
    # At 300: chunk 0 (HW 500) already has the change, chunk 1 (HW 100) does not.
    batch.add_event("u", [((3, 1), (13, 1))], BinlogPosition("binlog.000001", 300))
    plan = batch.plan()
    assert plan.delete == [] and [r[0] for r in plan.upsert] == [13] and batch.dropped == 1
    assert batch.changes == {"c": 0, "u": 1, "d": 0}  # one change, one of its images already in the snapshot


def test_table_without_primary_key_is_refused():
    with pytest.raises(ValueError, match="no row key"):
        TableBatch(TableSchema("d", "k", SCHEMA.columns, ()))


def test_skip_filter_uses_checkpoint_and_per_table_offsets():
    cp = BinlogPosition("binlog.000003", 500)
    table_done = BinlogPosition("binlog.000003", 900)
    skip = SkipFilter(cp, {"d.a": position_key_of_version(table_done.seq())})
    assert skip.applied("d.b", BinlogPosition("binlog.000003", 500))
    assert not skip.applied("d.b", BinlogPosition("binlog.000003", 501))
    assert skip.applied("d.a", BinlogPosition("binlog.000003", 900))
    assert not skip.applied("d.a", BinlogPosition("binlog.000004", 4))


def test_offset_round_trip_and_resume_not_after_applied():
    o = StreamOffset(BinlogPosition("binlog.000001", 100), BinlogPosition("binlog.000001", 300), "0-1-5", 17)
    assert StreamOffset.from_json(o.to_json()) == o
    with pytest.raises(ValueError):
        StreamOffset(BinlogPosition("binlog.000002", 4), BinlogPosition("binlog.000001", 300))


def test_lifecycle_allows_only_its_transitions():
    life = Lifecycle()
    for s in (State.STARTING, State.STREAMING, State.STARTING, State.STREAMING, State.STOPPING, State.STOPPED):
        life.to(s)
    with pytest.raises(RuntimeError):
        life.to(State.STREAMING)
    with pytest.raises(RuntimeError):
        Lifecycle().to(State.STREAMING)
