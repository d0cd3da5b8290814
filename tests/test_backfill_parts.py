"""The online backfill's pure parts (cdc_core/chunks/incremental.py), no server needed: the merge
decision and its window (also for a read group merged past its chunks' own high
watermarks), read-group and merge-commit sizes, splitting Delta's rows per chunk, request states, key
bounds and range clipping."""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from decimal import Decimal

import pyarrow as pa
import pytest

from cdc_core.chunks.incremental import (
    BackfillRequest,
    BackfillState,
    ChunkMerge,
    chunk_positions,
    clip,
    key_value,
    latest_requests,
    merge_group_size,
    merge_writes,
    read_group_size,
)
from cdc_core.chunks.planning import Chunk
from cdc_core.errors import BadInput
from cdc_core.schema.table import Column
from cdc_core.types.geometry import GEOMETRY


def _decide(touched: set[tuple], chunk: list[tuple], candidates: list[tuple]) -> tuple[list[int], list[tuple]]:
    """The rows to upsert (indexes) and keys to delete of a chunk of integer keys ``(k,)``,
    given Delta's candidate keys only (not exact)."""
    schema = pa.schema([("k", pa.int64())])
    w = merge_writes(pa.Table.from_pylist([{"k": k} for (k,) in chunk], schema), ["k"],
                     ChunkMerge(touched).keys(schema), pa.Table.from_pylist([{"k": k} for (k,) in candidates], schema))
    assert w.append.to_pylist() == []
    return w.upsert.to_pylist(), [(r["k"],) for r in w.delete.to_pylist()]


def test_merge_writes_untouched_rows_and_deletes_untouched_candidates_absent_from_the_chunk():
    upsert, delete = _decide({(2,), (4,), (9,)}, [(1,), (2,), (3,)], [(1,), (3,), (4,), (5,), (9,)])
    assert upsert == [0, 2]  # key 2 was changed between the watermarks: the stream's row stays
    assert delete == [(5,)]  # 4 and 9 were touched (the stream applied their fate); 1 and 3 are in the chunk


def test_merge_reverts_nothing_the_stream_wrote_and_restores_what_it_did_not():
    """Simulate a range: Delta holds stale rows; the source changes keys between the
    watermarks; after the merge plus the stream's changes the range equals the source."""
    delta = {1: "stale", 2: "old", 3: "old", 7: "gone-in-mysql"}
    chunk = {1: "a", 2: "b-at-select", 3: "c", 5: "e"}  # the SELECT, somewhere between LW and HW
    window = [(2, "b-final"), (5, None), (6, "f")]  # changes in (LW, HW], applied by the stream
    source_at_hw = {1: "a", 2: "b-final", 3: "c", 6: "f"}
    for k, v in window:  # the stream applies the window first (it reaches HW before the merge)
        if v is None:
            delta.pop(k, None)
        else:
            delta[k] = v
    keys = [(k,) for k in chunk]
    upsert, delete = _decide({(k,) for k, _ in window}, keys, [(k,) for k in (1, 2, 3, 7)])
    for i in upsert:
        delta[keys[i][0]] = chunk[keys[i][0]]
    for (k,) in delete:
        delta.pop(k, None)
    assert delta == source_at_hw


def _group_merge(window_end: int) -> tuple[dict, dict]:
    """A read group of two chunks simulated on a timeline of binlog positions: S = 0; chunk A
    ([0, 10)) read at 2.5 between LW 2 and HW 3, chunk B ([10, 20)) at 5.5 between LW 5 and
    HW 6; the stream applies every change up to P = 9, past the group's highest HW, then both
    merge with the keys changed in (S, ``window_end``] touched. Returns (Delta's range after
    the merges, MySQL's range at P)."""
    source = {1: "a", 2: "b", 4: "d", 11: "k", 12: "l", 15: "o"}
    delta = {1: "stale", 2: "b", 3: "gone", 11: "k", 13: "gone", 15: "stale"}  # as of S: candidates
    changes = [(1, 2, "b1"), (2, 12, None), (4, 4, None), (5, 16, "p"), (7, 1, "a2"),  # (position, key, row)
               (8, 11, "k2"), (9, 17, "q")]
    candidates = set(delta)
    reads = {}
    for at, (lo, hi) in ((2.5, (0, 10)), (5.5, (10, 20))):
        state = dict(source)
        for pos, k, v in changes:
            if pos < at:
                state.pop(k, None) if v is None else state.__setitem__(k, v)
        reads[(lo, hi)] = {k: v for k, v in state.items() if lo <= k < hi}
    for _, k, v in changes:  # MySQL, and the stream applying every change up to P = 9
        for rows in (source, delta):
            rows.pop(k, None) if v is None else rows.__setitem__(k, v)
    touched = {(k,) for pos, k, _ in changes if 0 < pos <= window_end}
    for (lo, hi), rows in reads.items():
        keys = [(k,) for k in rows]
        upsert, delete = _decide(touched, keys, sorted((k,) for k in candidates if lo <= k < hi))
        for i in upsert:
            delta[keys[i][0]] = rows[keys[i][0]]
        for (k,) in delete:
            delta.pop(k, None)
    return delta, source


def test_a_read_group_merges_exactly_past_its_highest_high_watermark_with_every_change_since_s_touched():
    delta, source = _group_merge(window_end=9)
    assert delta == source
    # The window must run to the merge, not to a chunk's own HW: key 4, deleted at 4 (after A's
    # HW 3, before the merge), would come back from A's read.
    stale, _ = _group_merge(window_end=3)
    assert 4 not in source and stale[4] == "d"


def _overlapping_groups(seed: int, candidates_at_own_start: bool) -> tuple[list[tuple], list[tuple]]:
    """Two read groups in flight at once, exact candidates (integer keys), on a timeline of
    binlog positions: group A ([0, 10)) starts at S = 0 and is read at 2.5 (LW 2, HW 3);
    group B ([10, 20)) starts at S = 4, while A waits for its merge, and is read at 5.5
    (LW 5, HW 6); A merges at 7, B at 9, each with the keys changed since its own S
    touched. The stream applies every change (inserts, updates, deletes, keys moved, also
    across the two ranges) as it reaches it. Candidates are Delta's rows of the group's
    range as of its own S, or (``candidates_at_own_start`` false) B's taken with A's at 0.
    Returns (Delta's rows after both merges, MySQL's rows then), as sorted (key, value)."""
    rng = random.Random(seed)
    initial = {k: f"v{k}" for k in rng.sample(range(20), 12)}
    mysql = dict(initial)
    changes = []  # (position, key before or None (insert), key after or None (delete), value after)
    for pos in range(1, 10):
        k, other = rng.randrange(20), rng.randrange(20)
        if k not in mysql:
            change = (pos, None, k, f"i{pos}")
        elif rng.random() < 0.4:
            change = (pos, k, None, None)
        elif other not in mysql and rng.random() < 0.4:
            change = (pos, k, other, f"m{pos}")
        else:
            change = (pos, k, k, f"u{pos}")
        _apply(mysql, change)
        changes.append(change)
    delta = [*initial.items()]  # damaged: values changed, rows lost, rows MySQL never had
    for k in rng.sample(range(20), 6):
        delta = [(d, v) for d, v in delta if d != k] + ([] if k in initial and rng.random() < 0.5 else [(k, "x")])

    def mysql_at(at: float) -> dict:
        rows = dict(initial)
        for c in changes:
            if c[0] < at:
                _apply(rows, c)
        return rows

    def stream_to(at: float) -> None:  # whole after-images, inserted when missing
        nonlocal delta, applied
        for pos, before, after, value in changes:
            if applied < pos <= at:
                delta = [(k, v) for k, v in delta if k not in (before, after)]
                if after is not None:
                    delta.append((after, value))
        applied = max(applied, int(at))

    def held(lo: int, hi: int) -> list[tuple]:
        return [(k, v) for k, v in delta if lo <= k < hi]

    def merge(lo: int, hi: int, rows: dict, since: int, candidates: list[tuple]) -> None:
        nonlocal delta
        schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
        chunk = pa.Table.from_pylist([{"k": k, "v": v} for k, v in sorted(rows.items()) if lo <= k < hi], schema)
        touched = {(k,) for pos, before, after, _ in changes if since < pos <= applied for k in (before, after)
                   if k is not None}
        w = merge_writes(chunk, ["k"], ChunkMerge(touched).keys(pa.schema([("k", pa.int64())])),
                         pa.Table.from_pylist([{"k": k, "v": v} for k, v in candidates], schema), ["k", "v"])
        upserts = [(chunk["k"][i].as_py(), chunk["v"][i].as_py()) for i in w.upsert.to_pylist()]
        gone = {r["k"] for r in w.delete.to_pylist()} | {k for k, _ in upserts}
        delta = [(k, v) for k, v in delta if k not in gone] + upserts + \
            [(chunk["k"][i].as_py(), chunk["v"][i].as_py()) for i in w.append.to_pylist()]

    applied = 0
    candidates_a, early_b = held(0, 10), held(10, 20)  # S_A = 0, every change up to it committed
    stream_to(2.5)
    read_a = mysql_at(2.5)
    stream_to(4)
    candidates_b = held(10, 20) if candidates_at_own_start else early_b  # S_B = 4
    stream_to(5.5)
    read_b = mysql_at(5.5)
    stream_to(7)
    merge(0, 10, read_a, 0, candidates_a)
    stream_to(9)
    merge(10, 20, read_b, 4, candidates_b)
    return sorted(delta), sorted(mysql.items())


def _apply(rows: dict, change: tuple) -> None:
    _, before, after, value = change
    if before is not None:
        del rows[before]
    if after is not None:
        rows[after] = value


def test_overlapping_read_groups_merge_exactly_each_with_its_own_start():
    """The next group is read while the one before waits and merges (cdc_core/chunks/incremental.py):
    exact when each group's candidates and touched keys start at its own S; B's candidates
    taken at A's start would append a key the stream inserted in between a second time."""
    for seed in range(300):
        delta, mysql = _overlapping_groups(seed, candidates_at_own_start=True)
        assert delta == mysql, seed
    assert any(_overlapping_groups(seed, candidates_at_own_start=False)[0] !=
               _overlapping_groups(seed, candidates_at_own_start=False)[1] for seed in range(300))


def test_read_groups_are_large_only_for_large_requests_and_sized_by_rows():
    assert read_group_size(40, 40, None, 16, 10_000, 100_000) == 10  # Spark not up: 100,000 rows for the thread
    assert read_group_size(15, 15, 2, 16, 10_000, 100_000) == 1  # a small request never waits for Spark
    assert read_group_size(40, 40, 2, 0, 10_000, 100_000) == 1  # 0: never in groups
    assert read_group_size(400, 400, 2, 16, 10_000, 100_000) == 20  # 100,000 rows per task slot
    assert read_group_size(400, 400, 2, 16, 8096, 100_000) == 24  # whole chunks: 12 of 8,096 rows per slot
    assert read_group_size(40, 3, 2, 16, 10_000, 100_000) == 3  # never more than are left
    assert read_group_size(40, 40, 3, 16, 250_000, 100_000) == 3  # chunks larger than a slot's rows: one per slot
    assert read_group_size(40, 40, 2, 16, 1000, 2000) == 4  # configured: two 1,000-row chunks per slot


def test_merge_commits_hold_runs_of_chunks_bounded_by_rows_and_bytes():
    assert merge_group_size([10_000] * 20, [1 << 20] * 20, 100_000) == 10  # 100,000 rows in one commit
    assert merge_group_size([8096] * 24, [1 << 20] * 24, 100_000) == 12  # whole chunks, at most the bound
    assert merge_group_size([10_000] * 3, [1 << 20] * 3, 100_000) == 3  # the rest of the group
    assert merge_group_size([10_000] * 20, [50 << 20] * 20, 100_000, 128 << 20) == 2  # wide rows: the bytes bound
    assert merge_group_size([250_000, 10], [1, 1], 100_000) == 1  # a chunk above the bound commits alone
    assert merge_group_size([10, 250_000, 10], [1, 1, 1], 100_000) == 1  # never past the bound after the first
    assert merge_group_size([1000, 1001, 999], [1, 1, 1], 2000) == 1  # grown chunks (rows inserted) split sooner
    assert merge_group_size([], [], 100_000) == 0


def test_delta_rows_of_a_group_range_are_split_per_chunk():
    chunks = [Chunk("d.t", i, "id", lo, hi) for i, (lo, hi) in enumerate([(None, 10), (10, 20), (20, 30)])]
    assert chunk_positions([-5, 0, 9, 10, 19, 20, 29], chunks).tolist() == [0, 0, 0, 1, 1, 2, 2]
    bounded = chunks[1:]
    assert chunk_positions([9, 10, 29, 30, 99], bounded).tolist() == [-1, 0, 1, -1, -1]  # outside the group: no chunk's


def _req(**kw) -> BackfillRequest:
    return BackfillRequest(**{"id": "r1", "table": "d.t", **kw})


def test_latest_state_wins_and_a_finished_request_stays_finished():
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    rows = [_req(seq=1, updated_at=t0), _req(seq=2, state=BackfillState.RUNNING, updated_at=t0),
            _req(seq=3, state=BackfillState.CANCELLED, updated_at=t0),
            _req(seq=4, state=BackfillState.RUNNING, chunks_done=3, updated_at=t0),  # the stream, late
            _req(id="r2", seq=1, updated_at=t0 + dt.timedelta(seconds=1))]
    got = latest_requests(reversed(rows))
    assert [r.id for r in got] == ["r1", "r2"]
    assert got[0].state == BackfillState.CANCELLED and got[1].state == BackfillState.PENDING


def test_request_round_trips_through_its_control_row():
    chunks = (Chunk("d.t", 0, "k", None, Decimal("1.50")), Chunk("d.t", 1, "k", Decimal("1.50"), None))
    r = BackfillRequest.new("d.t", Decimal("0.5"), None).next(state=BackfillState.RUNNING, chunks=chunks,
                                                                chunks_done=1, rows=10)
    back = BackfillRequest.from_row(r.to_row("p"))
    assert back == r
    assert back.progress() == "running 1/2 chunks, 10 rows"
    assert back.describe_range() == "[0.5, ∞)"


def test_key_bounds_take_the_chunk_key_columns_type():
    assert key_value(Column("k", "bigint", "bigint(20)"), "42") == 42
    assert key_value(Column("k", "decimal", "decimal(10,2)"), "1.25") == Decimal("1.25")
    assert key_value(Column("k", "date", "date"), "2024-02-29") == dt.date(2024, 2, 29)
    assert key_value(Column("k", "varchar", "varchar(10)"), "abc") == "abc"
    with pytest.raises(BadInput, match="not a value of the chunk key column k"):
        key_value(Column("k", "int", "int(11)"), "ten")


@pytest.mark.parametrize("seed", range(20))
def test_a_run_of_chunks_decided_at_once_writes_what_each_chunk_decided_alone_writes(seed):
    """A merge commit of several chunks (pipelines/stream/online_backfill.py): the chunks' key
    ranges are disjoint (``a`` in [0, 2), [2, 4), [4, 6)), so one decision over their rows and
    candidates appends, upserts, deletes and leaves once exactly the keys the chunks' own
    decisions do, together; touched keys in and out of the ranges."""
    rng = random.Random(seed)
    key = ["a", "b"]
    runs = []
    for lo in (0, 2, 4):
        space = [(a, b) for a in range(lo, lo + 2) for b in (b"", b"x", b"\x00y")]
        chunk_rows = [_random_row(rng, k) for k in rng.sample(space, rng.randrange(len(space)))]
        held_rows = []
        for k in rng.sample(space, rng.randrange(len(space))):
            copy = next((r for r in chunk_rows if (r["a"], r["b"]) == k), None)
            row = dict(copy) if copy is not None and rng.random() < 0.6 else _random_row(rng, k)
            held_rows += [row] * (2 if rng.random() < 0.1 else 1)
        runs.append((pa.Table.from_pylist(chunk_rows, SCHEMA), pa.Table.from_pylist(held_rows, SCHEMA)))
    everything = [(a, b) for a in range(-1, 7) for b in (b"", b"x", b"\x00y")]
    touched = ChunkMerge(set(rng.sample(everything, rng.randrange(8)))).keys(runs[0][0].select(key).schema)

    def written(parts: list[tuple[pa.Table, pa.Table]], columns) -> tuple[set, ...]:
        out: tuple[set, ...] = (set(), set(), set(), set())
        for chunk, held in parts:
            w = merge_writes(chunk, key, touched, held if columns else held.select(key), columns)
            for got, rows in zip(out, (chunk.take(w.append), chunk.take(w.upsert), w.delete, w.twice)):
                got.update(zip(*(rows.column(k).to_pylist() for k in key)))
        return out

    together = [(pa.concat_tables([c for c, _ in runs]), pa.concat_tables([h for _, h in runs]))]
    for columns in (SCHEMA.names, None):
        assert written(together, columns) == written(runs, columns)


def test_clip_keeps_the_chunks_holding_the_range_and_bounds_them_by_it():
    plan = [Chunk("d.t", i, "k", lo, hi) for i, (lo, hi) in enumerate([(None, 10), (10, 20), (20, 30), (30, None)])]
    got = clip(plan, 1, 2, 12, 25)
    assert [(c.index, c.lo, c.hi) for c in got] == [(0, 12, 20), (1, 20, 25)]
    assert [(c.lo, c.hi) for c in clip(plan, 0, 3, None, None)] == [(None, 10), (10, 20), (20, 30), (30, None)]


def test_exact_rows_append_new_keys_upsert_changed_ones_and_skip_equal_ones():
    chunk = pa.table({"id": [1, 2, 3, 4], "v": ["a", "b", "c", "d"]})
    held = pa.table({"id": [1, 2, 4, 4], "v": ["a", "stale", "d", "d"]})
    none = ChunkMerge().keys(chunk.select(["id"]).schema)
    w = merge_writes(chunk, ["id"], none, held, ["id", "v"])
    assert w.append.to_pylist() == [2]  # Delta does not hold key 3
    assert w.upsert.to_pylist() == [1, 3]  # 2 differs; 4 is held twice (one copy stays, with the chunk's row)
    assert w.twice.to_pylist() == [{"id": 4}] and w.delete.num_rows == 0
    equal = merge_writes(chunk.slice(0, 1), ["id"], none, held.slice(0, 1), ["id", "v"])
    assert (equal.append.to_pylist(), equal.upsert.to_pylist()) == ([], [])  # equal: not written again


def _reference(chunk: pa.Table, key: list[str], touched: set[tuple], held: pa.Table, columns: list[str] | None):
    """The merge decided row by row in Python, on the values Arrow hands out (binlake's
    former merge): (append, upsert, delete, twice)."""
    def tuples(t: pa.Table, names: list[str]) -> list[tuple]:
        return list(zip(*(t.column(n).to_pylist() for n in names))) if t.num_rows else []
    keys, held_keys = tuples(chunk, key), tuples(held, key)
    counts = Counter(held_keys)
    twice = {k for k, n in counts.items() if n > 1}
    writes = [i for i, k in enumerate(keys) if k not in touched]
    delete = {k for k in counts if k not in set(keys) and k not in touched}
    if columns is None:
        return [], writes, delete, twice
    rows = dict(zip(held_keys, tuples(held, columns)))
    values = tuples(chunk, columns)
    append = [i for i in writes if keys[i] not in rows]
    upsert = [i for i in writes if keys[i] in rows and (keys[i] in twice or rows[keys[i]] != values[i])]
    return append, upsert, delete, twice


SCHEMA = pa.schema([("a", pa.int32()), ("b", pa.binary()), ("n", pa.int64()), ("f", pa.float64()),
                    ("d", pa.decimal128(10, 2)), ("s", pa.string()), ("t", pa.timestamp("us", "UTC")),
                    ("g", GEOMETRY)])


def _random_row(rng: random.Random, key: tuple) -> dict:
    def maybe(v):
        return None if rng.random() < 0.2 else v
    return {"a": key[0], "b": key[1], "n": maybe(rng.randrange(3)),
            "f": maybe(rng.choice([0.0, -0.0, 1.5, float("nan"), float("inf")])),
            "d": maybe(rng.choice([Decimal("1.50"), Decimal("1.5"), Decimal("-2.00")])),
            "s": maybe(rng.choice(["", "x", "é"])),
            "t": maybe(rng.choice([dt.datetime(2024, 1, 1, tzinfo=dt.UTC), dt.datetime(1970, 1, 1, tzinfo=dt.UTC)])),
            "g": maybe({"wkb": maybe(rng.choice([b"\x01", b""])), "srid": maybe(rng.choice([0, 4326]))})}


@pytest.mark.parametrize("seed", range(40))
def test_the_arrow_merge_decides_as_a_row_by_row_compare_on_random_chunks(seed):
    """Composite keys (int, binary), NULLs, NaN, decimals of two scales, structs, keys Delta
    holds twice, touched keys in and out of the chunk and Delta: the same (append, upsert,
    delete, twice) as comparing Python values row by row."""
    rng = random.Random(seed)
    space = [(a, b) for a in range(6) for b in (b"", b"x", b"\x00y")]
    chunk_keys = rng.sample(space, rng.randrange(len(space)))  # MySQL's rows: each key once
    chunk_rows = [_random_row(rng, k) for k in chunk_keys]
    held_rows = []
    for k in rng.sample(space, rng.randrange(len(space))):
        copy = next((r for r in chunk_rows if (r["a"], r["b"]) == k), None)
        row = dict(copy) if copy is not None and rng.random() < 0.6 else _random_row(rng, k)
        held_rows += [row] * (2 if rng.random() < 0.1 else 1)
    rng.shuffle(held_rows)
    touched = set(rng.sample(space, rng.randrange(6)))
    chunk, held = pa.Table.from_pylist(chunk_rows, SCHEMA), pa.Table.from_pylist(held_rows, SCHEMA)
    key = ["a", "b"]
    keys = ChunkMerge(touched).keys(chunk.select(key).schema)
    for columns in (SCHEMA.names, None):
        w = merge_writes(chunk, key, keys, held if columns else held.select(key), columns)
        got = (w.append.to_pylist(), w.upsert.to_pylist(), {(r["a"], r["b"]) for r in w.delete.to_pylist()},
               {(r["a"], r["b"]) for r in w.twice.to_pylist()})
        assert got == _reference(chunk, key, touched, held, columns)


@pytest.mark.parametrize("seed", range(20))
def test_the_merge_without_joins_decides_as_a_row_by_row_compare(seed):
    """Delta holding none of a chunk's range, or exactly its keys in its order (a range read
    again), is decided without joins: the same (append, upsert, delete, twice) as comparing
    Python values row by row, with touched keys in and out of the chunk; a chunk whose
    declared key repeats, or Delta's rows in another order, take the joins and decide alike."""
    rng = random.Random(seed)
    ids = sorted(rng.sample(range(40), rng.randrange(1, 20)))
    chunk_rows = [_random_row(rng, (a, b"")) for a in ids]
    same_keys = [dict(r) if rng.random() < 0.6 else _random_row(rng, (r["a"], b"")) for r in chunk_rows]
    repeated = chunk_rows + chunk_rows[:1]  # a declared key MySQL holds twice
    touched = {(a,) for a in rng.sample(range(40), rng.randrange(4))}
    cases = [(chunk_rows, []), (chunk_rows, same_keys), (chunk_rows, list(reversed(same_keys))),
             (repeated, repeated)]
    for chunk_rows_, held_rows in cases:
        chunk, held = pa.Table.from_pylist(chunk_rows_, SCHEMA), pa.Table.from_pylist(held_rows, SCHEMA)
        keys = ChunkMerge(touched).keys(chunk.select(["a"]).schema)
        w = merge_writes(chunk, ["a"], keys, held, SCHEMA.names)
        got = (w.append.to_pylist(), w.upsert.to_pylist(), {(r["a"],) for r in w.delete.to_pylist()},
               {(r["a"],) for r in w.twice.to_pylist()})
        assert got == _reference(chunk, ["a"], touched, held, SCHEMA.names)
