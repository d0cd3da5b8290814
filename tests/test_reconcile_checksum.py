"""``binlake reconcile``: per-chunk counts and checksums on the server and on Delta
(pipelines/reconcile/checksums.py, cdc_core/types/checksum.py).

- Every type of the type matrix (tests/test_types.py) and a column in every character set
  of the server render alike on both sides: a fresh snapshot is equal, nothing left out.
- Rows deleted, changed and added in Delta are reported as exactly the chunks holding
  their keys, with their ranges and both row counts; the CLI exits 1, records the result
  in ``_binlake/reconcile_runs`` and ``binlake status --json`` shows it.
- A chunk that differs at the first check and is equal at a re-check is not reported.
- A case-insensitive string key split into several chunks is grouped on Delta's side in
  the server's order (a Delta key Python would sort elsewhere lands in the server's chunk).
- Routed tables are compared on their own rows of the sink, as one chunk.
- An unknown ``--table``: exit 2 with one line.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import struct
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from cdc_core.schema.output import CDC_SOURCE
from pipelines.lake.control_store import ControlStore
from pipelines.lake.tables import table_uri
from pipelines.lake.writer_lock import writer_lock
from pipelines.reconcile.checksums import ChunkMismatch, reconcile_tables
from tests.helpers import PASSWORD_VAR, snapshot, write_config_file
from tests.test_types import _insert, load_type_matrix

REPO = Path(__file__).resolve().parents[1]


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``binlake`` of this tree (``python -m pipelines.cli``), as a user runs it."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=REPO)


def _fill(conn, sql: str, rows: list[tuple]) -> None:
    with conn.cursor() as cur:
        cur.executemany(sql, rows)
        cur.execute("ANALYZE TABLE " + sql.split()[2])  # the planner's row estimate: dense integer chunks
        cur.fetchall()


def test_every_type_and_charset_is_equal(db, mariadb, spark, make_config):
    name, conn = db
    load_type_matrix(mariadb, conn, name)
    # Floats at the edges of the exact rendering: subnormals, powers of two, exponent limits,
    # negative zero, integers past 2^53, values both sides print in different notations.
    for i, (f, d) in enumerate([("1e-45", "5e-324"), ("-1.17549435e-38", "2.2250738585072014e-308"),
                                ("16777216", "9007199254740993"), ("-0.0", "-0.0"), ("0.5", "1e15"),
                                ("1e-5", "0.0001"), ("3.4028234e38", "-1.7976931348623157e308"),
                                ("8388608.5", "4503599627370496.5")], start=10):
        _insert(conn, "types", {"id": i, "f": f, "dbl": d, "f4": f, "re": d})
    with conn.cursor() as cur:
        cur.execute("SELECT CHARACTER_SET_NAME, MAXLEN FROM information_schema.CHARACTER_SETS "
                    "WHERE CHARACTER_SET_NAME <> 'binary' ORDER BY 1")
        sets = dict(cur.fetchall())
        cur.execute("CREATE TABLE cs (id INT PRIMARY KEY, " + ", ".join(
            f"`{c}` VARCHAR(300) CHARACTER SET {c}, `{c}_t` TEXT CHARACTER SET {c}" for c in sets) + ")")
        # Each single-byte set's every byte (as the server stores them), and a few characters in the others.
        for i, text in enumerate(["", "Ascii only, with, commas", "N", None], start=1):
            cur.execute("INSERT INTO cs VALUES (%s" + ", %s, %s" * len(sets) + ")",
                        [i, *[v for _ in sets for v in (text, text)]])
        byte_cols = ", ".join(f"`{c}` = CONVERT(X'{bytes(range(128 if c == 'ascii' else 256)).hex()}' USING {c}), "
                              f"`{c}_t` = `{c}`" for c, n in sets.items() if n == 1)
        cur.execute(f"UPDATE cs SET {byte_cols} WHERE id = 2")
        cur.execute("UPDATE cs SET utf8mb4 = 'Ünïcødé ✓ 中文 😀', utf8mb4_t = REPEAT('é😀,', 5000), "
                    "utf16 = '中文 😀', gbk = '中文文本', sjis = '日本語', big5 = '繁體', euckr = '한국어', "
                    "utf8mb3 = 'ñandú', ucs2 = 'Привет' WHERE id = 1")

    cfg = make_config(name, chunk_size=3)
    snapshot(cfg, spark)
    report = reconcile_tables(cfg, rechecks=0)
    by_table = {t.table: t for t in report.tables}
    types, charsets = by_table[f"{name}.types"], by_table[f"{name}.cs"]
    assert types.excluded == {} and charsets.excluded == {}
    assert types.mysql_rows == types.delta_rows == 15 and types.chunks_checked >= 4
    assert charsets.mysql_rows == charsets.delta_rows == 4
    assert report.equal, [m for t in report.tables for m in t.mismatches]

    # Each rendering is exact: the least change of one cell in Delta makes its chunk differ.
    uri = table_uri(cfg.sink.path, f"{name}.types")
    original = DeltaTable(uri).to_pyarrow_table()
    rows = original.to_pylist()
    row3 = next(r for r in rows if r["id"] == 3)
    changes = {
        "dbl": math.nextafter(row3["dbl"], 1.0), "f": _next_f32(row3["f"]), "bi_u": row3["bi_u"] + 1,
        "dec65": row3["dec65"][:-1] + "2", "dec30": row3["dec30"] + Decimal("1e-10"),
        "dt6": row3["dt6"] + dt.timedelta(microseconds=1), "ts6": row3["ts6"] + dt.timedelta(microseconds=1),
        "tm6": row3["tm6"] + 1, "d": row3["d"] + dt.timedelta(days=1), "yr2": 1971, "ch": "ab ",
        "vc": row3["vc"].upper(), "tx": row3["tx"] + ".", "bn": b"\xff\x00\x00\x01", "bl": b"", "bit1": False,
        "bit10": b"\x02\x01", "en": "small", "st": "a,b,c", "js": '"just a string "', "uu": row3["uu"][:-1] + "1",
        "i6": "::ffff:192.168.0.2", "g": {**row3["g"], "srid": 27701}, "l1": "naive façade", "gs": None,
    }
    for col, value in changes.items():
        assert value != row3[col], col
        changed = [{**r, col: value} if r["id"] == 3 else r for r in rows]
        write_deltalake(uri, pa.Table.from_pylist(changed, schema=original.schema), mode="overwrite")
        (t,) = reconcile_tables(cfg, [f"{name}.types"], rechecks=0, record=False).tables
        assert [(m.lo is None or m.lo <= 3) and (m.hi is None or 3 < m.hi) for m in t.mismatches] == [True], col


def _next_f32(x: float) -> float:
    """The next float32 above ``x``."""
    (bits,) = struct.unpack("<I", struct.pack("<f", x))
    return struct.unpack("<f", struct.pack("<I", bits + 1))[0]


@pytest.fixture
def snapshotted_items(db, spark, make_config):
    """``items`` (INT key, 1..1000, dense: chunks of 100) snapshotted; (name, conn, cfg)."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY, label VARCHAR(30), price DECIMAL(10,2), "
                    "at DATETIME(3))")
    _fill(conn, "INSERT INTO items VALUES (%s, %s, %s, '2024-01-01 00:00:00.125' + INTERVAL %s SECOND)",
          [(i, f"item {i}", i / 4, i) for i in range(1, 1001)])
    cfg = make_config(name, chunk_size=100)
    snapshot(cfg, spark)
    return name, conn, cfg


def test_corrupted_delta_reports_exactly_its_chunks(snapshotted_items, tmp_path):
    name, conn, cfg = snapshotted_items
    table = f"{name}.items"
    first = reconcile_tables(cfg, rechecks=0, record=False)
    (clean,) = first.tables
    assert clean.equal and clean.chunks_checked >= 8 and clean.mysql_rows == clean.delta_rows == 1000

    uri = table_uri(cfg.sink.path, table)
    delta = DeltaTable(uri)
    delta.delete("id IN (150, 151)")  # rows missing from Delta
    delta.update(updates={"label": "'tampered'"}, predicate="id = 420")  # a value changed
    row = {"id": 5000, "label": "ghost", "price": None, "at": None, "_cdc_op": "c", "_cdc_seq": 1}
    schema = pa.schema(delta.schema().to_arrow())
    write_deltalake(uri, pa.Table.from_pylist([row], schema=schema), mode="append")  # a key MySQL lacks

    report = reconcile_tables(cfg, rechecks=1, recheck_wait=0.0)
    (t,) = report.tables
    assert not report.equal and t.rechecks == 1
    assert t.mysql_rows == 1000 and t.delta_rows == 999
    by_key = {150: None, 420: None, 5000: None}
    for m in t.mismatches:
        assert isinstance(m, ChunkMismatch) and m.table == table and m.key == "id"
        for k in by_key:
            if (m.lo is None or m.lo <= k) and (m.hi is None or k < m.hi):
                by_key[k] = m
    assert all(by_key.values()), by_key  # each corrupted key is inside a reported range
    assert len(t.mismatches) == 3  # and nothing else is reported
    assert (by_key[150].mysql_rows - by_key[150].delta_rows, by_key[420].mysql_rows - by_key[420].delta_rows,
            by_key[5000].delta_rows - by_key[5000].mysql_rows) == (2, 0, 1)
    assert by_key[5000].hi is None  # past MAX(id): the last, unbounded chunk
    with conn.cursor() as cur:  # the row counts are the server's for those ranges
        for m in t.mismatches:
            where, params = m.chunk().where()
            cur.execute(f"SELECT COUNT(*) FROM items WHERE {where}", params)
            assert cur.fetchone()[0] == m.mysql_rows

    # The CLI: exit 1, JSON with the ranges; recorded in _binlake/ and shown by status.
    path = write_config_file(cfg, tmp_path / "binlake.yaml")
    os.environ[PASSWORD_VAR] = cfg.source.password.get_secret_value()
    lock = writer_lock(cfg.sink.path, cfg.pipeline.name, "a stream", cfg.sink.storage_options)
    lock.acquire()  # a writer running: reconcile is read-only and does not wait for or take the lock
    try:
        r = cli("reconcile", "-c", path, "--json", "--rechecks", "0")
    finally:
        lock.release()
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    (shown,) = out["tables"]
    assert out["equal"] is False and shown["mismatched_chunks"] == 3 and shown["excluded_columns"] == {}
    assert sorted((m["lo"], m["hi"]) for m in shown["mismatches"] if m["lo"] is not None) == sorted(
        (m.lo, m.hi) for m in t.mismatches if m.lo is not None)
    assert shown["server_position"] and shown["stream_position"] is None  # no stream has run

    latest = ControlStore.of(cfg).latest_reconcile()[table]
    assert latest["mismatched_chunks"] == 3 and latest["equal"] is False and latest["server_file"]
    assert sorted(m["index"] for m in latest["mismatches"]) == sorted(m.index for m in t.mismatches)
    r = cli("status", "-c", path, "--json")
    assert r.returncode == 0, r.stderr
    (row,) = [x for x in json.loads(r.stdout)["tables"] if x["table"] == table]
    assert row["reconcile"]["mismatched_chunks"] == 3 and row["reconcile"]["equal"] is False
    assert row["reconcile"]["at"] == latest["started_at"].isoformat()

    r = cli("reconcile", "-c", path)  # the human table
    assert r.returncode == 1 and "differs" in r.stdout and "chunk" in r.stdout and "Traceback" not in r.stderr


def test_a_difference_that_passes_is_not_reported(snapshotted_items):
    """A chunk that differs at the first check (the stream not yet applied a change) and is
    equal at a re-check is not reported; the positions of the last check are."""
    name, conn, cfg = snapshotted_items
    DeltaTable(table_uri(cfg.sink.path, f"{name}.items")).delete("id = 5")  # as if the stream applied a delete

    def progress(table: str, done: int, total: int) -> None:
        if done == total:  # every chunk of the first check is counted on the server: now the source catches up
            with conn.cursor() as cur:
                cur.execute("DELETE FROM items WHERE id = 5")

    (t,) = reconcile_tables(cfg, rechecks=3, recheck_wait=0.1, progress=progress, record=False).tables
    assert t.equal and t.rechecks == 1 and t.mysql_rows == t.delta_rows == 999
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    assert (t.server_position.file, t.server_position.pos) == (file, pos)  # after the delete: the last check's


def test_string_key_in_case_insensitive_collation(db, spark, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE words (w VARCHAR(20) COLLATE utf8mb4_unicode_ci PRIMARY KEY, n INT)")
    # Mixed case: byte order (upper case first) differs from the collation's.
    keys = [f"{'K' if i % 3 == 0 else 'k'}{i:03d}{'ä' if i % 5 == 0 else ''}" for i in range(60)]
    _fill(conn, "INSERT INTO words VALUES (%s, %s)", [(k, i) for i, k in enumerate(keys)])
    cfg = make_config(name, chunk_size=7)
    snapshot(cfg, spark)
    table = f"{name}.words"
    (t,) = reconcile_tables(cfg, rechecks=0, record=False).tables
    assert t.equal and t.chunks_checked >= 8 and t.delta_rows == 60

    # A Delta row whose key sorts right after k044 in the collation, but before every
    # lower-case key in byte order; and one row's value changed.
    assert keys[44] == "k044" and keys[10] == "k010ä"
    uri = table_uri(cfg.sink.path, table)
    delta = DeltaTable(uri)
    write_deltalake(uri, pa.Table.from_pylist([{"w": "K0445", "n": 1, "_cdc_op": "c", "_cdc_seq": 1}],
                                              schema=pa.schema(delta.schema().to_arrow())), mode="append")
    DeltaTable(uri).update(updates={"n": "-1"}, predicate="w = 'k010ä'")
    (t,) = reconcile_tables(cfg, rechecks=0, record=False).tables
    assert len(t.mismatches) == 2
    with conn.cursor() as cur:
        for key in ("k044", "k010ä"):  # the server says which chunk holds each (K0445 is next to k044)
            holding = []
            for m in t.mismatches:
                where, params = m.chunk().where()
                cur.execute(f"SELECT COUNT(*) FROM words WHERE w = %s AND {where}", [key, *params])
                holding += [m] * cur.fetchone()[0]
            assert len(holding) == 1, key
    delta_only = [m for m in t.mismatches if m.delta_rows == m.mysql_rows + 1]
    assert len(delta_only) == 1 and delta_only[0].lo is not None  # not the first chunk, where bytes would put it


def test_routed_tables_compare_their_own_rows(db, spark, make_config):
    name, conn = db
    with conn.cursor() as cur:
        for shard in ("u_1", "u_2"):
            cur.execute(f"CREATE TABLE {shard} (id INT PRIMARY KEY, v VARCHAR(10), f FLOAT)")
            cur.executemany(f"INSERT INTO {shard} VALUES (%s, %s, %s)", [(i, f"{shard}-{i}", i / 3) for i in range(50)])
    cfg = make_config(name, routes=[{"source": rf"{name}\.u_\d+", "sink": f"{name}.u"}])
    snapshot(cfg, spark)
    report = reconcile_tables(cfg, rechecks=0, record=False)
    assert report.equal and all(t.whole_table and t.chunks_checked == 1 and t.sink == f"{name}.u"
                                for t in report.tables)
    DeltaTable(table_uri(cfg.sink.path, f"{name}.u")).delete(f"{CDC_SOURCE} = '{name}.u_2' AND id = 7")
    report = reconcile_tables(cfg, [f"{name}.u_2", f"{name}.u_1"], rechecks=0, record=False)
    assert [(t.table, t.equal) for t in report.tables] == [(f"{name}.u_2", False), (f"{name}.u_1", True)]
    assert report.mismatches == [ChunkMismatch(f"{name}.u_2", 0, None, None, None, 50, 49)]


def test_cli_unknown_table_is_bad_input(db, make_config, tmp_path):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    cfg = make_config(name)
    path = write_config_file(cfg, tmp_path / "binlake.yaml")
    os.environ[PASSWORD_VAR] = cfg.source.password.get_secret_value()
    r = cli("reconcile", "-c", path, "--table", f"{name}.nope")
    assert r.returncode == 2
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and f"unknown table '{name}.nope'" in lines[0] and f"{name}.t" in lines[0], r.stderr
    assert r.stdout == "" and "Traceback" not in r.stderr
    assert not (tmp_path / "lake" / "_binlake" / "reconcile_runs").exists()  # nothing recorded
