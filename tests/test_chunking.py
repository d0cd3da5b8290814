"""Chunk planner invariants: chunks tile the key space (unbounded ends, hi == next lo),
ranges are half-open so every row is in exactly one chunk, boundary-query chunks hold
at most chunk_size rows unless one key value alone has more."""

from __future__ import annotations

import pytest

from cdc_core.chunks.planning import Chunk, ChunkKeyError, chunk_key, decode_value, encode_value, plan_chunks
from cdc_core.schema.table import describe_table


def _plan(conn, db, table, key, size):
    with conn.cursor() as cur:
        schema = describe_table(cur, db, table)
        return schema, plan_chunks(cur, schema, key, size)


def _counts(conn, table, chunks):
    out = []
    with conn.cursor() as cur:
        for c in chunks:
            cond, params = c.where()
            cur.execute(f"SELECT COUNT(*) FROM `{table}` WHERE {cond}", params)
            out.append(cur.fetchone()[0])
    return out


def _assert_tiles(chunks):
    assert chunks[0].lo is None and chunks[-1].hi is None
    assert all(a.hi == b.lo for a, b in zip(chunks, chunks[1:]))
    assert [c.index for c in chunks] == list(range(len(chunks)))


@pytest.mark.parametrize("ids,arithmetic", [(range(1, 1001), True), ([*range(1, 900), 10**12, 10**13], False)])
def test_int_keys_tile_and_count(db, ids, arithmetic):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id BIGINT PRIMARY KEY)")
        cur.executemany("INSERT INTO t VALUES (%s)", [(i,) for i in ids])
        cur.execute("ANALYZE TABLE t")
    _, chunks = _plan(conn, name, "t", "id", 100)
    _assert_tiles(chunks)
    counts = _counts(conn, "t", chunks)
    assert sum(counts) == len(ids)
    if arithmetic:
        assert all(isinstance(c.lo, int) for c in chunks[1:]) and max(counts) <= 200
    else:  # skewed: boundary queries keep chunks at chunk_size rows
        assert max(counts) <= 100 and len(chunks) >= 9


def test_heavy_leading_value_stays_in_one_chunk(db):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (a VARCHAR(5), b INT, PRIMARY KEY (a, b))")
        cur.executemany("INSERT INTO t VALUES (%s, %s)", [("x", i) for i in range(350)] + [("y", 1), ("z", 1)])
    _, chunks = _plan(conn, name, "t", "a", 100)
    _assert_tiles(chunks)
    counts = _counts(conn, "t", chunks)
    assert sum(counts) == 352 and 350 in counts  # ties are never split across chunks


def test_empty_table_is_one_unbounded_chunk(db):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    _, chunks = _plan(conn, name, "t", "id", 10)
    assert chunks == [Chunk(f"{name}.t", 0, "id")]


def test_chunk_key_rules(db):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE nokey (a INT NOT NULL, b INT NULL)")
        schema = describe_table(cur, name, "nokey")
    with pytest.raises(ChunkKeyError, match="has no primary key"):
        chunk_key(schema, {})
    with pytest.raises(ChunkKeyError, match="must be NOT NULL"):
        chunk_key(schema, {f"{name}.nokey": "b"})
    with pytest.raises(ChunkKeyError, match="not a column"):
        chunk_key(schema, {f"{name}.nokey": "zz"})
    assert chunk_key(schema, {f"{name}.nokey": "a"}) == "a"


def test_boundaries_round_trip_through_json():
    import datetime as dt
    from decimal import Decimal

    for v in (None, 5, "ß😀", Decimal("1.50"), dt.date(2024, 2, 29), dt.datetime(2024, 1, 1, 3, 4, 5, 6), b"\x00\xff"):
        assert decode_value(encode_value(v)) == v


@pytest.mark.parametrize("parallelism", [1, 3])
def test_snapshot_row_count_over_plan_spans_equals_count_star(db, mariadb, parallelism, monkeypatch):
    """The snapshot's MySQL row count (COUNT(*) per span of consecutive chunks, at once) is the
    table's COUNT(*), also for rows written after planning beyond the old MIN/MAX and for
    string keys in a case-insensitive collation; a table without a plan is counted whole.
    Tables of one span counted together (one statement for several, or for each) count the same."""
    from cdc_core.source.connection import ConnectionSettings, connect
    from pipelines.snapshot import verify
    from pipelines.snapshot.verify import count_single_spans, count_spans, mysql_rows

    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE `n%t` (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO `n%t` SELECT seq FROM seq_100_to_1099")
        cur.execute("CREATE TABLE s (k VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY)")
        cur.executemany("INSERT INTO s VALUES (%s)", [(f"{c}{i:03d}",) for c in "aBcD" for i in range(60)])
    _, ints = _plan(conn, name, "n%t", "id", 70)
    _, strings = _plan(conn, name, "s", "k", 25)
    with conn.cursor() as cur:  # after planning: below MIN, above MAX, and inside
        cur.execute("INSERT INTO `n%t` VALUES (-5), (1), (5000000), (1100)")
        cur.execute("INSERT INTO s VALUES ('0'), ('b999'), ('zz'), ('C500')")
    settings = ConnectionSettings(mariadb.host, mariadb.port, mariadb.user, mariadb.password)

    def opened():
        return connect(settings)

    assert len(ints) > 3 and len(strings) > 3
    assert mysql_rows(opened, f"{name}.n%t", ints, parallelism) == 1004
    assert mysql_rows(opened, f"{name}.s", strings, parallelism) == 244
    assert mysql_rows(opened, f"{name}.s", [], parallelism) == 244
    one_span = {f"{name}.n%t": count_spans(f"{name}.n%t", [], parallelism)[0], f"{name}.s": Chunk.span(strings)}
    for batch in (verify.COUNT_BATCH, 1):
        monkeypatch.setattr(verify, "COUNT_BATCH", batch)
        with opened() as c, c.cursor() as cur:
            assert count_single_spans(cur, one_span) == {f"{name}.n%t": 1004, f"{name}.s": 244}
