"""Tables without a primary key that still have a row identity (TableSchema.row_key): a
NOT NULL unique key (found by describe_table and by the CREATE TABLE parser, as InnoDB
itself picks one), or the columns named in ``source.key_columns``. Their snapshot reads
chunks lock-free and the stream applies updates and deletes by that key, so Delta equals
MySQL row by row after random writes, key moves included."""

from __future__ import annotations

import dataclasses
import json
import random
from collections import Counter

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake

from cdc_core.batch.table_batch import KeylessBatch, table_batch
from cdc_core.config import ConfigError
from cdc_core.offset.position import BinlogPosition
from cdc_core.offset.startup import StartupError
from cdc_core.schema.change import evolve_schema, parse_ddl
from cdc_core.schema.history import conversion_schema
from cdc_core.schema.table import Column, TableSchema, describe_table
from cdc_core.source.capture import NotCapturable, captured_schema
from pipelines.lake.apply import apply_keyless
from pipelines.stream import StreamEngine
from tests.helpers import assert_equal, snapshot


def _describe(cur, db: str, ddl: str) -> TableSchema:
    cur.execute(ddl)
    table = ddl.split()[2]
    return describe_table(cur, db, table)


def test_describe_finds_a_not_null_unique_key(db):
    name, conn = db
    with conn.cursor() as cur:
        s = _describe(cur, name, "CREATE TABLE u1 (a INT, b VARCHAR(10) NOT NULL, c INT NOT NULL, "
                                 "UNIQUE KEY k_nullable (a), UNIQUE KEY k_bc (b, c))")
        assert (s.primary_key, s.unique_key, s.row_key) == ((), ("b", "c"), ("b", "c"))
        s = _describe(cur, name, "CREATE TABLE u2 (a INT, b INT, UNIQUE KEY (a))")
        assert s.row_key == ()  # a unique key that may be NULL identifies nothing
        s = _describe(cur, name, "CREATE TABLE u3 (t VARCHAR(100) NOT NULL, UNIQUE KEY (t(10)))")
        assert s.row_key == ()  # a prefix is unique, not the column
        s = _describe(cur, name, "CREATE TABLE u4 (id INT PRIMARY KEY, code INT NOT NULL UNIQUE)")
        assert (s.primary_key, s.unique_key) == (("id",), ())
        s = _describe(cur, name, "CREATE TABLE u5 (id SERIAL, v INT)")
        assert s.row_key == ("id",)
    # Recorded in the schema history and read back (an older binlake's JSON has no unique key).
    assert TableSchema.from_json(s.to_json()) == s
    assert s.to_json() == json.dumps(dataclasses.asdict(s))  # the document earlier binlakes recorded, byte for byte
    legacy = s.to_json().replace(', "unique_key": ["id"]', "")
    assert TableSchema.from_json(legacy).unique_key == ()


def test_describing_many_tables_at_once_equals_each_alone(db, monkeypatch):
    """describe_tables (a few information_schema queries for many tables) gives each table the
    schema describe_table gives it alone: keys of each kind, column order, a missing table left
    out; also across batches of DESCRIBE_BATCH tables."""
    from cdc_core.schema import table as table_module
    from cdc_core.source.connection import describe_tables

    name, conn = db
    ddl = ["CREATE TABLE p (id INT PRIMARY KEY, v VARCHAR(5), d DECIMAL(9,3) NOT NULL)",
           "CREATE TABLE k (a INT NOT NULL, b ENUM('x','y') NOT NULL, c BIT(3), UNIQUE KEY (b, a))",
           "CREATE TABLE n (a INT, b TEXT)",
           "CREATE TABLE m (z INT, y INT, x INT, PRIMARY KEY (y, z))"]
    with conn.cursor() as cur:
        for statement in ddl:
            cur.execute(statement)
        alone = {f"{name}.{t}": describe_table(cur, name, t) for t in ("p", "k", "n", "m")}
        asked = [f"{name}.p", f"{name}.k", f"{name}.gone", f"{name}.n", f"{name}.m"]
        assert describe_tables(cur, asked) == alone
        monkeypatch.setattr(table_module, "DESCRIBE_BATCH", 2)
        assert describe_tables(cur, asked) == alone
    assert [c.name for c in alone[f"{name}.m"].columns] == ["z", "y", "x"]
    assert alone[f"{name}.m"].primary_key == ("y", "z") and alone[f"{name}.k"].unique_key == ("b", "a")


def _schema(*cols: tuple[str, bool], pk=(), unique=()) -> TableSchema:
    return TableSchema("d", "t", tuple(Column(n, "int", "int", nullable) for n, nullable in cols), pk, unique)


def test_key_columns_config(make_config):
    cfg = make_config("d", source={"key_columns": {"d.t": ["A", "b"]}})
    s = captured_schema(_schema(("a", False), ("b", False), ("c", True)), cfg.source)
    assert s.row_key == ("a", "b")  # spelled as the table spells them
    with pytest.raises(NotCapturable, match=r"d\.t\.b, which may be NULL"):
        captured_schema(_schema(("a", False), ("b", True)), cfg.source)
    with pytest.raises(NotCapturable, match=r"d\.t\.b, which is not a column"):
        captured_schema(_schema(("a", False)), cfg.source)
    with pytest.raises(NotCapturable, match=r"has a primary key \(a\)"):
        captured_schema(_schema(("a", False), ("b", False), pk=("a",)), cfg.source)
    with pytest.raises(ConfigError):
        make_config("d", source={"key_columns": {"d.t": "a"}})
    # A unique key partly left out identifies nothing; a configured key column cannot be left out.
    cfg = make_config("d", source={"exclude_columns": [r"d\.t\.b"]})
    assert captured_schema(_schema(("a", False), ("b", False), unique=("a", "b")), cfg.source).row_key == ()
    cfg = make_config("d", source={"exclude_columns": [r"d\.t\.b"], "key_columns": {"d.t": ["a", "b"]}})
    with pytest.raises(NotCapturable, match=r"leaves out d\.t\.b, a key column"):
        captured_schema(_schema(("a", False), ("b", False)), cfg.source)


def test_create_table_parser_finds_the_unique_key():
    def created(sql: str) -> TableSchema:
        (c,) = parse_ddl(sql, "d")
        return c.schema

    assert created("CREATE TABLE t (a INT, b INT NOT NULL, c INT NOT NULL, UNIQUE (a), "
                   "CONSTRAINT k UNIQUE KEY k (b, c) USING BTREE)").row_key == ("b", "c")
    assert created("CREATE TABLE t (a INT NOT NULL UNIQUE, b INT)").row_key == ("a",)
    assert created("CREATE TABLE t (id SERIAL, v INT)").row_key == ("id",)
    assert created("CREATE TABLE t (t VARCHAR(50) NOT NULL, UNIQUE INDEX (t(5)))").row_key == ()
    assert created("CREATE TABLE t (a INT NOT NULL, UNIQUE ((a + 1)))").row_key == ()
    s = created("CREATE TABLE t (a INT NOT NULL UNIQUE, b INT, PRIMARY KEY (b))")
    assert (s.primary_key, s.unique_key) == (("b",), ())


def test_unique_key_follows_schema_changes():
    s = _schema(("a", False), ("b", False), ("c", True), unique=("a", "b"))

    def after(sql: str) -> TableSchema:
        out = s
        for c in parse_ddl(sql, "d"):
            out = evolve_schema(out, c)
        return out

    assert after("ALTER TABLE t RENAME COLUMN b TO b2").row_key == ("a", "b2")
    assert after("ALTER TABLE t ADD COLUMN d INT").row_key == ("a", "b")
    assert after("ALTER TABLE t DROP COLUMN b").row_key == ()
    assert after("ALTER TABLE t MODIFY b BIGINT NULL").row_key == ()
    assert after("ALTER TABLE t CHANGE b b3 BIGINT NOT NULL").row_key == ("a", "b3")
    assert after("ALTER TABLE t ADD PRIMARY KEY (c)").row_key == ("c",)
    # Rows decoded with a table map (which has no unique keys) keep the declared key.
    layout = dataclasses.replace(s, columns=tuple(dataclasses.replace(c, name=c.name.upper()) for c in s.columns),
                                 unique_key=())
    assert conversion_schema(s, layout, BinlogPosition("b.000001", 4))[0].row_key == ("A", "B")


KEYLESS = (
    # a NOT NULL unique key (composite), and a SERIAL column (BIGINT UNSIGNED NOT NULL UNIQUE)
    "CREATE TABLE uk (region VARCHAR(8) COLLATE utf8mb4_general_ci NOT NULL, n INT NOT NULL, v INT, "
    "note VARCHAR(20), UNIQUE KEY by_region_n (region, n))",
    "CREATE TABLE serial_t (id SERIAL, v INT, note VARCHAR(20))",
    # no unique key at all: its rows are identified by the configured source.key_columns
    "CREATE TABLE conf (code CHAR(6) NOT NULL, v INT, note VARCHAR(20), KEY (code))",
)


def _writes(cur, rng: random.Random, steps: int, first: int) -> None:
    """Random inserts (new keys numbered from ``first``), updates (also of the key columns),
    deletes on the three tables."""
    for i in range(first, first + steps):
        r = rng.random()
        n = rng.randint(1, 300)
        if r < 0.25:
            cur.execute("INSERT IGNORE INTO uk (region, n, v, note) VALUES (%s, %s, %s, 'ins')",
                        (rng.choice("ABC"), 1000 + i, n))
            cur.execute("INSERT INTO serial_t (v, note) VALUES (%s, 'ins')", (n,))
            cur.execute("INSERT IGNORE INTO conf VALUES (%s, %s, 'ins')", (f"n{i:05d}", n))
        elif r < 0.55:
            cur.execute("UPDATE uk SET v = v + 1, note = 'upd' WHERE n BETWEEN %s AND %s", (n, n + 5))
            cur.execute("UPDATE serial_t SET v = v + 1 WHERE id BETWEEN %s AND %s", (n, n + 5))
            cur.execute("UPDATE conf SET v = v + 1 WHERE code = %s", (f"c{n:05d}",))
        elif r < 0.75:  # the key itself moves (a case-only change is the same key in this collation)
            cur.execute("UPDATE IGNORE uk SET region = LOWER(region), n = n + 100000 WHERE n = %s", (n,))
            cur.execute("UPDATE IGNORE serial_t SET id = id + 100000 WHERE id = %s", (n,))
            cur.execute("UPDATE IGNORE conf SET code = CONCAT('m', SUBSTR(code, 2)) WHERE code = %s", (f"c{n:05d}",))
        else:
            cur.execute("DELETE FROM uk WHERE n = %s", (n,))
            cur.execute("DELETE FROM serial_t WHERE id = %s", (n,))
            cur.execute("DELETE FROM conf WHERE code = %s", (f"c{n:05d}",))


def test_tables_identified_by_a_unique_key_or_configured_columns(db, spark, make_config):
    name, conn = db
    rng = random.Random(8)
    with conn.cursor() as cur:
        for ddl in KEYLESS:
            cur.execute(ddl)
        cur.execute("INSERT INTO uk SELECT ELT(1 + seq % 3, 'A', 'B', 'C'), seq, seq, 'init' FROM seq_1_to_300")
        cur.execute("INSERT INTO serial_t (v, note) SELECT seq, 'init' FROM seq_1_to_300")
        cur.execute("INSERT INTO conf SELECT CONCAT('c', LPAD(seq, 5, '0')), seq, 'init' FROM seq_1_to_300")
    names = [f"{name}.uk", f"{name}.serial_t", f"{name}.conf"]
    cfg = make_config(name, chunk_size=40, source={"key_columns": {f"{name}.conf": ["code"]}},
                      stream={"max_batch_rows": 50})
    with conn.cursor() as cur:
        _writes(cur, rng, 30, 0)  # before the snapshot
    snapshot(cfg, spark)
    with conn.cursor() as cur:
        _writes(cur, rng, 150, 100)  # streamed in several batches, keys moving within one batch too
    StreamEngine(cfg, until_now=True).run()
    assert_equal(cfg, names)
    with conn.cursor() as cur:
        _writes(cur, rng, 100, 300)
        cur.execute("ALTER TABLE uk ADD COLUMN extra INT DEFAULT 7")  # the key survives a schema change
        _writes(cur, rng, 50, 400)
    StreamEngine(cfg, until_now=True).run()
    assert_equal(cfg, names)


# --- no row key at all: rows identified by their whole values ---------------------------------------

LOOSE = TableSchema("d", "t", (Column("a", "int", "int(11)"), Column("b", "varchar", "varchar(10)")), ())


def test_keyless_batch_is_a_multiset_difference():
    """Per distinct value, copies added minus copies removed, whatever the order within the
    batch (random events checked against a multiset model of the table)."""
    rng = random.Random(3)
    for _ in range(200):
        table = Counter({(rng.randrange(3), rng.choice(["x", None])): rng.randrange(3) for _ in range(4)})
        before = +table
        batch = table_batch(LOOSE)
        assert isinstance(batch, KeylessBatch)
        for i in range(rng.randrange(1, 12)):
            pos = BinlogPosition("b.000001", 100 + 10 * i)
            present = list((+table).elements())
            value = (rng.randrange(3), rng.choice(["x", None]))
            r = rng.random()
            if r < 0.4 or not present:
                table[value] += 1
                batch.add_event("c", [value], pos)
            elif r < 0.7:
                old = rng.choice(present)
                table[old] -= 1
                new = old if rng.random() < 0.3 else value  # an update that changes nothing visible counts too
                table[new] += 1
                batch.add_event("u", [(old, new)], pos)
            else:
                old = rng.choice(present)
                table[old] -= 1
                batch.add_event("d", [old], pos)
        plan = batch.plan()
        assert not plan.upsert
        after = Counter(before)
        after.update(tuple(r[:2]) for r in plan.append)
        after.subtract(tuple(r[:2]) for r in plan.delete)
        assert +after == +table
        assert all(r[2] == "d" for r in plan.delete) and all(r[2] != "d" for r in plan.append)


def test_apply_keyless_removes_n_of_m_equal_rows(tmp_path):
    """Removing some copies of a value keeps the others unchanged (their _cdc_seq too); NULL
    equals NULL; a value with no copy left to remove changes nothing."""
    schema = pa.schema([("a", pa.int32()), ("b", pa.string()), ("_cdc_op", pa.string()), ("_cdc_seq", pa.int64())])
    rows = [(1, "x", "r", 1), (1, "x", "r", 2), (1, "x", "r", 3), (2, "y", "r", 4), (None, None, "r", 5),
            (None, None, "r", 6)]
    write_deltalake(str(tmp_path), pa.Table.from_pylist([dict(zip(schema.names, r)) for r in rows], schema))
    dt = DeltaTable(str(tmp_path))

    def table(rows):
        return pa.Table.from_pylist([dict(zip(schema.names, r)) for r in rows], schema)

    applied = apply_keyless(dt, ("a", "b"), table([(3, "z", "c", 9)]),
                            table([(1, "x", "d", 7), (1, "x", "d", 7), (None, None, "d", 8), (5, "q", "d", 8)]),
                            CommitProperties())
    assert (applied.inserted, applied.deleted) == (1, 3)
    got = sorted(DeltaTable(str(tmp_path)).to_pyarrow_table().to_pylist(), key=lambda r: r["_cdc_seq"])
    assert [(r["a"], r["b"], r["_cdc_seq"]) for r in got] == [(1, "x", 3), (2, "y", 4), (None, None, 6), (3, "z", 9)]


KEYLESS_WRITES = (
    "INSERT INTO loose (a, b, note) VALUES (%(n)s, %(m)s, 'dup'), (%(n)s, %(m)s, 'dup'), (%(n)s, NULL, NULL)",
    "UPDATE loose SET b = b + 1 WHERE a = %(n)s LIMIT 1",
    "UPDATE loose SET note = 'same' WHERE a BETWEEN %(n)s AND %(n)s + 3",
    "UPDATE loose SET b = NULL WHERE a = %(n)s AND b = %(m)s LIMIT 1",
    "DELETE FROM loose WHERE a = %(n)s LIMIT 1",
    "DELETE FROM loose WHERE a = %(n)s AND note = 'dup'",
    "UPDATE loose SET a = a + 1000 WHERE a = %(n)s",
)


def test_table_without_any_key_equals_mysql_with_duplicates(db, spark, make_config):
    """No primary key, no unique key: duplicate rows, NULLs, updates of one copy of several
    (LIMIT 1), updates that change nothing, moves of the chunk key; snapshot under nothing,
    then several catch-ups across restarts and a schema change."""
    name, conn = db
    rng = random.Random(11)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE loose (a INT NOT NULL, b INT, note VARCHAR(10), KEY (a))")
        cur.execute("INSERT INTO loose SELECT seq % 50, seq % 7, IF(seq % 3, 'dup', NULL) FROM seq_1_to_400")
        cur.execute("CREATE TABLE spatial_loose (a INT NOT NULL, g POINT)")
    cfg = make_config(name, chunk_size=15, stream={"max_batch_rows": 40}, source={
        "snapshot": {"chunk_key_columns": {f"{name}.loose": "a", f"{name}.spatial_loose": "a"}},
        "exclude_tables": [rf"{name}\.spatial_loose"]})
    snapshot(cfg, spark)

    def writes(steps: int) -> None:
        with conn.cursor() as cur:
            for _ in range(steps):
                cur.execute(rng.choice(KEYLESS_WRITES), {"n": rng.randrange(60), "m": rng.randrange(7)})

    for round_ in range(3):
        writes(120)
        if round_ == 1:
            with conn.cursor() as cur:
                cur.execute("ALTER TABLE loose ADD COLUMN extra INT DEFAULT 5")
        StreamEngine(cfg, until_now=True).run()
        assert_equal(cfg, [f"{name}.loose"])
    # A keyless table whose rows cannot be compared whole (a spatial column) is refused, by name.
    cfg = make_config(name, source={"snapshot": {"chunk_key_columns": {f"{name}.spatial_loose": "a"}},
                                    "tables": [rf"{name}\.spatial_loose"]})
    snapshot(cfg, spark)
    with pytest.raises(StartupError, match=rf"{name}\.spatial_loose has no primary key .* \(g: spatial values\)"):
        StreamEngine(cfg, until_now=True).run()
