"""The hand-off with chunk keys in the server's order, against a real MariaDB.

- The key order (cdc_core/types/key_order.py) against the server's own ORDER BY and
  comparisons, for every collation the planner can split on, with adversarial strings
  (case, accents, trailing spaces and tabs, ß/ss, æ/ae, contractions, emoji, '').
- The planner's chunks of string keys (composite too) and of non-string keys hold
  exactly the keys, as the binlog gives them, that the hand-off filter places in them.
- The filter's cost: one query per row event at most, none for cached keys or outside
  the hand-off window; its connection survives a reconnect.
- The chunk reader folds a window by the same order.
- End to end: a VARCHAR key in a case-insensitive collation, a random writer (inserts,
  updates, deletes, key updates that change case or move across chunks) during the
  snapshot and after it, the stream to ``--until now``: Delta equals MySQL row by row.
"""

from __future__ import annotations

import random
import threading
import time

import connectorx as cx
import pyarrow as pa
import pytest

from cdc_core.binlog.range_reads import read_changes
from cdc_core.chunks.handoff import HandoffFilter
from cdc_core.chunks.planning import Chunk, decode_value, encode_value, plan_chunks
from cdc_core.chunks.reader import ChunkReader
from cdc_core.offset.position import BinlogPosition as P
from cdc_core.offset.position import master_position
from cdc_core.schema.table import describe_table
from cdc_core.source.connection import connect, connection_settings
from cdc_core.types.key_order import ComparisonOrder, KeyOrders, PythonOrder, ServerSql, WeightOrder
from cdc_core.types.mapping import binlog_value
from pipelines.stream import StreamEngine
from tests.helpers import assert_equal, replay_handoff, snapshot

ADVERSARIAL = (
    "", " ", "  ", "a", "A", "a ", "A ", "a  ", "a\t", "a\n", "\t", "a\x01", "ab\x01 ", "á", "Á", "à", "ä", "Ä",
    "ae", "AE", "æ", "Æ", "ß", "ss", "SS", "Ss", "ẞ", "s", "st", "ß ", "ss ", "z", "Z", "ö", "oe", "ø", "ü", "ue",
    "u", "y", "😀", "😁", "😀a", "a😀", "𝒜", "ﬃ", "ffi", "ch", "Ch", "cz", "h", "i", "ı", "İ", "I", "-", "_", "0",
    "9", "10", "ab", "aB", "Ab", "ab ", "a b", "ab\t", "a\u0301", "é", "e\u0301", "Ａ", "a\u00a0",
)

# (charset, collation, the order expected): PAD SPACE and NO PAD, case- and accent-insensitive,
# binary, expanding (ß = ss) and contracting (ch) collations, multi-level UCA 14.0 ones, and two
# whose WEIGHT_STRING disagrees with their own comparisons (compared by the server instead).
COLLATIONS = [
    ("utf8mb4", "utf8mb4_general_ci", WeightOrder),
    ("utf8mb4", "utf8mb4_unicode_ci", WeightOrder),
    ("utf8mb4", "utf8mb4_unicode_520_ci", WeightOrder),
    ("utf8mb4", "utf8mb4_bin", WeightOrder),
    ("utf8mb4", "utf8mb4_nopad_bin", WeightOrder),
    ("utf8mb4", "utf8mb4_general_nopad_ci", WeightOrder),
    ("utf8mb4", "utf8mb4_unicode_nopad_ci", WeightOrder),
    ("utf8mb4", "utf8mb4_german2_ci", WeightOrder),
    ("utf8mb4", "utf8mb4_czech_ci", WeightOrder),
    ("utf8mb4", "utf8mb4_uca1400_ai_ci", WeightOrder),
    ("utf8mb4", "utf8mb4_uca1400_as_cs", WeightOrder),
    ("utf8mb4", "utf8mb4_uca1400_nopad_ai_cs", ComparisonOrder),
    ("utf8mb3", "utf8mb3_general_ci", WeightOrder),
    ("latin1", "latin1_swedish_ci", WeightOrder),
    ("latin1", "latin1_german2_ci", WeightOrder),
    ("latin1", "latin1_bin", WeightOrder),
    ("ascii", "ascii_general_ci", WeightOrder),
    ("ascii", "ascii_bin", WeightOrder),
    ("cp1250", "cp1250_czech_cs", ComparisonOrder),
    ("binary", None, PythonOrder),  # VARBINARY: bytes, no collation
]


def _column_sql(charset: str, collation: str | None, length: int = 20) -> str:
    if collation is None:
        return f"VARBINARY({length})"
    return f"VARCHAR({length}) CHARACTER SET {charset} COLLATE {collation}"


def _representable(cur, charset: str, values) -> list:
    if charset == "binary":
        return [v.encode() for v in values]
    cur.execute("SELECT " + ", ".join(f"CONVERT(CONVERT(%s USING {charset}) USING utf8mb4) = %s COLLATE utf8mb4_bin"
                                       for _ in values), [x for v in values for x in (v, v)])
    return [v for v, ok in zip(values, cur.fetchone(), strict=True) if ok]


@pytest.mark.parametrize("charset,collation,kind", COLLATIONS, ids=[c[1] or c[0] for c in COLLATIONS])
def test_key_order_is_the_servers(db, charset, collation, kind):
    """Every value's rank among all distinct values (in the server's ORDER BY) is the number
    of them the server's ``<=`` puts at or below it: order and equality both as the server's."""
    name, conn = db
    col = _column_sql(charset, collation)
    with conn.cursor() as cur:
        values = _representable(cur, charset, ADVERSARIAL)
        cur.execute(f"CREATE TABLE s (i INT PRIMARY KEY, v {col}, KEY (v))")
        cur.execute(f"CREATE TABLE b (i INT PRIMARY KEY, v {col})")
        cur.executemany("INSERT INTO s VALUES (%s, %s)", list(enumerate(values)))
        # In index order, as the planner walks a key (a filesort uses the sort keys, which for
        # cp1250_czech_cs disagree with the comparisons that select a chunk's rows).
        cur.execute("SELECT v FROM s FORCE INDEX (v) ORDER BY v")
        ordered = [r[0] for r in cur.fetchall()]
        # Bounds as the planner makes them: distinct and ascending in the server's order.
        cur.execute("SELECT " + ", ".join("STRCMP(%s, %s)" if collation is None else
                                          f"STRCMP(CONVERT(%s USING {charset}) COLLATE {collation}, "
                                          f"CONVERT(%s USING {charset}))" for _ in ordered[1:]),
                    [x for a, b in zip(ordered, ordered[1:]) for x in (a, b)])
        steps = cur.fetchone()
        assert all(s in (0, -1) for s in steps), "the server's ORDER BY is not ascending by its comparison"
        bounds = [ordered[0]] + [b for b, s in zip(ordered[1:], steps, strict=True) if s == -1]
        cur.executemany("INSERT INTO b VALUES (%s, %s)", list(enumerate(bounds)))
        cur.execute("SELECT s.i, COUNT(b.v) FROM s LEFT JOIN b ON b.v <= s.v GROUP BY s.i")
        truth = dict(cur.fetchall())
        schema = describe_table(cur, name, "s")
    order = KeyOrders(ServerSql.on(conn)).for_column(schema.column("v"))
    assert type(order) is kind
    ranks = order.partition(bounds).locate(values)
    wrong = [(values[i], r, truth[i]) for i, r in enumerate(ranks) if r != truth[i]]
    assert not wrong, f"{collation}: (value, our rank, the server's) {wrong[:8]}"
    assert len(set(ranks)) == len(bounds)  # every bound is its own rank: equal only where the server says so


def _chunk_truth(cur, table: str, chunks: list[Chunk]) -> dict[int, int]:
    """Row id → index of the chunk whose SELECT returns the row."""
    truth: dict[int, int] = {}
    for c in chunks:
        cond, params = c.where()
        cur.execute(f"SELECT i FROM {table} WHERE {cond}", params)
        for (i,) in cur.fetchall():
            assert i not in truth, f"row {i} in two chunks"
            truth[i] = c.index
    return truth


def _filter_places_binlog_keys(cfg, conn, database: str, table: str, key: str, create: str, rows: list,
                               chunk_size: int = 7) -> HandoffFilter:
    """Insert ``rows`` (column ``i`` first), plan chunks on ``key``, and check the filter places
    every key, as the binlog gives it, in the chunk whose SELECT returns its row."""
    settings = connection_settings(cfg)
    with conn.cursor() as cur:
        cur.execute(create)
        start = master_position(cur)
        marks = ", ".join(["%s"] * len(rows[0]))
        cur.executemany(f"INSERT IGNORE INTO {table} VALUES ({marks})", rows)  # keys equal to an earlier one: skipped
        end = master_position(cur)
        schema = describe_table(cur, database, table)
        chunks = plan_chunks(cur, schema, key, chunk_size)
        truth = _chunk_truth(cur, table, chunks)
    assert len(chunks) > 3
    # The stream's plans come back from the control store: through its JSON form.
    chunks = [Chunk(c.table, c.index, c.key, decode_value(encode_value(c.lo)), decode_value(encode_value(c.hi)))
              for c in chunks]
    f = HandoffFilter.for_table(schema, chunks, {c.index: P("b.000001", 100) for c in chunks},
                                KeyOrders(ServerSql.on(conn)))
    col = schema.column(key)
    images = [ch.after for ch in read_changes(settings, cfg.source.server_id + 7, start, end, {(database, table)})]
    assert len(images) == len(truth)
    wrong = [(img[key], f.chunk_for(binlog_value(col, img[key])).index, truth[img["i"]]) for img in images
             if f.chunk_for(binlog_value(col, img[key])).index != truth[img["i"]]]
    assert not wrong, f"(key, filter's chunk, the SELECT's chunk): {wrong[:8]}"
    return f


@pytest.mark.parametrize("charset,collation", [
    ("utf8mb4", "utf8mb4_general_ci"), ("utf8mb4", "utf8mb4_unicode_ci"), ("latin1", "latin1_german2_ci"),
    ("utf8mb4", "utf8mb4_nopad_bin"),
])
def test_filter_places_string_keys_in_the_planners_chunks(db, make_config, charset, collation):
    """A composite key (s, n) chunked on its leading string column."""
    name, conn = db
    rng = random.Random(3)
    with conn.cursor() as cur:
        keys = [(k, 9) for k in _representable(cur, charset, ADVERSARIAL)]
    keys += [(_key(rng), rng.randrange(3)) for _ in range(300)]
    create = f"CREATE TABLE t (i INT UNIQUE, s {_column_sql(charset, collation)}, n INT, PRIMARY KEY (s, n))"
    _filter_places_binlog_keys(make_config(name), conn, name, "t", "s", create,
                               [(i, s, n) for i, (s, n) in enumerate(keys)])


NON_STRING_KEYS = [
    ("INT", lambda i: i * 7 - 900),
    ("BIGINT UNSIGNED", lambda i: 2**64 - 1 - i * 2**50 if i % 2 else i),
    ("DECIMAL(12,3)", lambda i: f"{(i - 150) * 3.125:.3f}"),
    ("DECIMAL(45,5)", lambda i: f"{(i - 150) * 10**30 + i}.12345"),  # kept as text: more than 38 digits
    ("DOUBLE", lambda i: (i - 150) * 1.5e10),
    ("DATE", lambda i: f"{1990 + i // 12}-{i % 12 + 1:02d}-{i % 28 + 1:02d}"),
    ("DATETIME(6)", lambda i: f"2020-01-01 00:00:{i % 60:02d}.{i:06d}"),
    ("TIMESTAMP(3)", lambda i: f"2021-03-28 0{i % 10}:{i % 60:02d}:00.{i % 1000:03d}"),
    ("VARBINARY(8)", lambda i: bytes([i % 7, (i * 31) % 256, 0, 32])[: i % 4 + 1]),
    ("BINARY(4)", lambda i: bytes([i % 5, (i * 17) % 256])[: i % 2 + 1]),
]


@pytest.mark.parametrize("sql_type,value", NON_STRING_KEYS, ids=[t for t, _ in NON_STRING_KEYS])
def test_filter_places_non_string_keys_without_the_server(db, make_config, sql_type, value):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
    f = _filter_places_binlog_keys(make_config(name), conn, name, "t", "k",
                                   f"CREATE TABLE t (i INT UNIQUE, k {sql_type} PRIMARY KEY)",
                                   [(i, value(i)) for i in range(300)])
    assert not f._partition.remote


class CountingSql:
    """The real server, counting queries."""

    def __init__(self, sql: ServerSql):
        self.sql, self.queries = sql, 0

    def rows(self, sql, params):
        self.queries += 1
        return self.sql.rows(sql, params)

    def close(self):
        self.sql.close()


def test_filter_asks_once_per_row_event_and_caches(db):
    name, conn = db
    rng = random.Random(5)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id VARCHAR(12) COLLATE utf8mb4_unicode_ci PRIMARY KEY)")
        cur.executemany("INSERT IGNORE INTO t VALUES (%s)", [(_key(rng),) for _ in range(400)])
        schema = describe_table(cur, name, "t")
        chunks = plan_chunks(cur, schema, "id", 20)
    hws = {c.index: P("b.000001", 1000 + c.index) for c in chunks}
    sql = CountingSql(ServerSql.on(conn))
    f = HandoffFilter.for_table(schema, chunks, hws, KeyOrders(sql))
    mid = P("b.000001", 1000 + len(chunks) // 2)
    f.chunk_for("")  # the bounds' sort keys: fetched once, on first use
    event = [_key(rng) for _ in range(60)]  # one row event's images
    sql.queries = 0
    decisions = f.drops(event, mid)
    assert sql.queries == 1
    assert decisions == [mid <= hws[f.chunk_for(k).index] for k in event] == [f.should_drop(k, mid) for k in event]
    assert True in decisions and False in decisions
    assert sql.queries == 1  # the event's keys are cached: the per-image answers asked nothing
    fresh = [k + "x" for k in event]
    assert f.drops(fresh, P("b.000001", 1000)) == [True] * 60  # before every chunk's HW
    assert f.drops(fresh, P("b.000001", 1000 + len(chunks))) == [False] * 60  # past the hand-off
    assert sql.queries == 1


def test_filter_connection_is_made_again_when_lost(db, mariadb):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id VARCHAR(12) COLLATE utf8mb4_general_ci PRIMARY KEY)")
        cur.executemany("INSERT INTO t VALUES (%s)", [(f"k{i:03d}",) for i in range(100)])
        schema = describe_table(cur, name, "t")
        chunks = plan_chunks(cur, schema, "id", 10)
    sql = ServerSql(mariadb.connect)
    f = HandoffFilter.for_table(schema, chunks, {c.index: P("b.000001", 100 + c.index) for c in chunks},
                                KeyOrders(sql))
    before, = sql.rows("SELECT CONNECTION_ID()", [])[0]
    with conn.cursor() as cur:
        cur.execute(f"KILL CONNECTION {before}")
    assert f.chunk_for("K055").index == f.chunk_for("k055").index == 5
    after, = sql.rows("SELECT CONNECTION_ID()", [])[0]
    assert after != before
    sql.close()


def test_chunk_reader_folds_its_window_in_the_collations_order(db, make_config):
    """Writes after the chunk's SELECT and before its HW: case and trailing-space key changes,
    keys moving in and out of the range, keys equal to a bound but for case."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id VARCHAR(10) COLLATE utf8mb4_general_ci PRIMARY KEY, v INT)")
        cur.executemany("INSERT INTO t VALUES (%s, 0)",
                        [(k,) for k in ("a", "B", "b1", "c ", "Cz", "D", "é", "f", "ß", "Z")])
        schema = describe_table(cur, name, "t")
    settings = connection_settings(make_config(name))
    writes = ["UPDATE t SET id = 'C', v = 1 WHERE id = 'c '", "UPDATE t SET id = 'bz', v = 2 WHERE id = 'a'",
              "UPDATE t SET id = 'G ', v = 3 WHERE id = 'D'", "INSERT INTO t VALUES ('ss', 4), ('DD', 5), ('Ea', 6)",
              "UPDATE t SET id = 'b', v = 7 WHERE id = 'B'", "DELETE FROM t WHERE id = 'CZ'",
              "UPDATE t SET v = 8 WHERE id = 'É'"]

    def fetch(sql: str) -> pa.Table:
        table = cx.read_sql(settings.connectorx_url(name), sql, return_type="arrow")
        with conn.cursor() as cur:
            for w in writes:  # invisible to the SELECT, inside the window: the fold must apply them
                cur.execute(w)
        return table

    chunk = Chunk(schema.qualified_name, 1, "id", "B", "e")
    with connect(settings) as control:
        result = ChunkReader(settings, control, fetch, server_id=4321).read(schema, chunk)
    assert result.window_changes > 0
    cond, params = chunk.where()
    with conn.cursor() as cur:
        cur.execute(f"SELECT id, v FROM t WHERE {cond}", params)
        want = sorted(cur.fetchall())
    assert sorted((r["id"], r["v"]) for r in result.table.to_pylist()) == want


# Letters whose case, accents and expansions sort differently in Python (code points) and
# in the collations (a = A = á, ß = ss or s, trailing spaces ignored under PAD SPACE).
_ALPHABET = "aAbBcCeEéÉsSßzZöÖ"


def _key(rng: random.Random) -> str:
    word = "".join(rng.choice(_ALPHABET) for _ in range(rng.randrange(1, 5)))
    return word + " " * (rng.random() < 0.1)


def _recase(word: str, rng: random.Random) -> str:
    return "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in word)


def _writer(settings, database: str, seed: int, stop: threading.Event, counts: dict) -> None:
    """Inserts, updates, deletes and key updates (a case change, or a move to any other key,
    across chunk boundaries) on ``k`` and ``c`` until ``stop``."""
    rng = random.Random(seed)
    with connect(settings, database=database) as conn, conn.cursor() as cur:
        while not stop.is_set():
            cur.execute("SELECT id FROM k WHERE id >= %s ORDER BY id LIMIT 1", (_key(rng),))
            row = cur.fetchone()
            if row is None:
                continue
            k, r = row[0], rng.random()
            if r < 0.25:
                cur.execute("INSERT IGNORE INTO k VALUES (%s, 0, 'ins')", (_key(rng),))
            elif r < 0.45:
                cur.execute("UPDATE k SET n = n + 1, s = %s WHERE id = %s", (f"u{counts['ops']}", k))
            elif r < 0.55:
                cur.execute("DELETE FROM k WHERE id = %s", (k,))
            elif r < 0.7:
                cur.execute("UPDATE IGNORE k SET id = %s, n = n + 1 WHERE id = %s", (_recase(k, rng), k))
            elif r < 0.85:
                cur.execute("UPDATE IGNORE k SET id = %s, n = n + 1 WHERE id = %s", (_key(rng), k))
            else:
                conn.begin()
                cur.execute("INSERT IGNORE INTO c VALUES (%s, %s, 0)", (_key(rng), rng.randrange(3)))
                cur.execute("UPDATE IGNORE c SET s = %s, v = v + 1 WHERE s = %s", (_recase(k, rng), k))
                cur.execute("DELETE FROM c WHERE s = %s AND n = %s", (_key(rng), rng.randrange(3)))
                conn.commit()
            counts["ops"] += 1
            time.sleep(0.002)  # a steady few hundred writes a second, not a flood


def _tables(conn, charset: str, collation: str, rows: int) -> None:
    rng = random.Random(7)
    col = f"VARCHAR(12) CHARACTER SET {charset} COLLATE {collation}"
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE k (id {col} PRIMARY KEY, n INT, s VARCHAR(20))")
        cur.execute(f"CREATE TABLE c (s {col}, n INT, v INT, PRIMARY KEY (s, n))")
        cur.executemany("INSERT IGNORE INTO k VALUES (%s, 0, 'x')", [(_key(rng),) for _ in range(rows)])
        cur.executemany("INSERT IGNORE INTO c VALUES (%s, %s, 0)",
                        [(_key(rng), rng.randrange(3)) for _ in range(rows // 2)])


@pytest.mark.parametrize("charset,collation", [
    ("utf8mb4", "utf8mb4_general_ci"),
    ("utf8mb4", "utf8mb4_unicode_ci"),
    ("latin1", "latin1_swedish_ci"),
])
def test_case_insensitive_keys_hand_off_exactly(db, spark, make_config, charset, collation):
    name, conn = db
    _tables(conn, charset, collation, rows=1500)
    # One chunk per Spark task: every chunk has its own watermarks, so a key located in the
    # wrong chunk is judged against the wrong high watermark.
    cfg = make_config(name, parallelism=2, source={"snapshot": {"chunk_size": 40, "max_rows_per_task": 120}})
    names = [f"{name}.k", f"{name}.c"]
    stop, counts = threading.Event(), {"ops": 0}
    t = threading.Thread(target=_writer, args=(connection_settings(cfg), name, 11, stop, counts))
    t.start()
    try:
        snapshot(cfg, spark)
        during = counts["ops"]
        while counts["ops"] < during + 400 and t.is_alive():  # and after it, before the stream starts
            time.sleep(0.05)
    finally:
        stop.set()
        t.join()
    assert during > 100, "the writer barely ran during the snapshot"
    assert counts["ops"] >= during + 400

    states = replay_handoff(cfg, names)  # the test helper's replay follows the same order
    StreamEngine(cfg, until_now=True).run()
    assert_equal(cfg, names)
    with connect(connection_settings(cfg)) as c2, c2.cursor() as cur:
        cur.execute(f"SELECT id, n, s FROM `{name}`.k")
        want = {r[0]: r for r in cur.fetchall()}
    assert {k[0]: (v[0], v[1], v[2]) for k, v in states[f"{name}.k"].items()} == want
