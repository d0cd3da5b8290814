"""Table and column names with backticks, quotes, spaces, unicode, SQL keywords and SQL
text are always quoted: such tables are snapshotted and streamed exactly (Delta equals MySQL),
and a name written as an injection (``x`; DROP TABLE y; --``) injects nothing (``y`` is still
there with its rows)."""

from __future__ import annotations

from pathlib import Path

from cdc_core.schema.table import quote_ident
from tests.helpers import assert_equal, snapshot

INJECTION = "x`; DROP TABLE y; --"
# name → column definitions (besides the key); every name is quoted with quote_ident when created.
TABLES = {
    INJECTION: {"c`; DROP TABLE y; --": "VARCHAR(40)", "it's \"v\"": "INT"},
    "order": {"select": "INT", "from": "VARCHAR(60)", "key": "DATE"},
    "naïve 表 name": {"naïve col": "VARCHAR(60)", "a b": "DECIMAL(6,2)"},
    "it's \"q\" % # ?": {"'; DELETE FROM y; '": "VARCHAR(60)", "\"dq\"": "TEXT"},
}


def _create(conn) -> None:
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE y (id INT PRIMARY KEY)")
        cur.executemany("INSERT INTO y VALUES (%s)", [(i,) for i in range(5)])
        for table, cols in TABLES.items():
            defs = ", ".join(f"{quote_ident(c)} {t}" for c, t in cols.items())
            cur.execute(f"CREATE TABLE {quote_ident(table)} (`id; DROP TABLE y` INT PRIMARY KEY, {defs})")
            insert = f"INSERT INTO {quote_ident(table).replace('%', '%%')} VALUES (%s" + ", %s" * len(cols) + ")"
            for i in range(1, 121):
                cur.execute(insert, [i, *(_value(t, i) for t in cols.values())])


def _value(sql_type: str, i: int):
    if sql_type.startswith("INT"):
        return i * 3
    if sql_type.startswith("DECIMAL"):
        return f"{i}.25"
    if sql_type == "DATE":
        return f"2024-01-{i % 28 + 1:02d}"
    return f"`'\"; DROP TABLE y; -- {i}"


def _y_rows(conn) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM y")
        return cur.fetchone()[0]


def test_names_are_quoted_everywhere(db, spark, make_config):
    from pipelines.stream import StreamEngine

    name, conn = db
    _create(conn)
    names = [f"{name}.{t}" for t in TABLES] + [f"{name}.y"]
    cfg = make_config(name, chunk_size=25)
    summary = snapshot(cfg, spark)
    assert {s.table for s in summary.tables} == set(names)
    assert all(s.chunks >= 4 for s in summary.tables if not s.table.endswith(".y"))
    assert _y_rows(conn) == 5
    assert_equal(cfg, names)
    for t in TABLES:  # each table in its own folder, named as the table
        assert (Path(cfg.sink.path) / name / t / "_delta_log").is_dir()

    with conn.cursor() as cur:
        for t, cols in TABLES.items():
            q = quote_ident(t)
            first = quote_ident(next(iter(cols)))
            cur.execute(f"UPDATE {q} SET {first} = NULL WHERE `id; DROP TABLE y` <= 10")
            cur.execute(f"DELETE FROM {q} WHERE `id; DROP TABLE y` > 110")
            cur.execute(f"UPDATE {q} SET `id; DROP TABLE y` = `id; DROP TABLE y` + 1000 WHERE `id; DROP TABLE y` = 50")
            cur.execute(f"INSERT INTO {q} (`id; DROP TABLE y`) VALUES (500)")
    result = StreamEngine(cfg, until_now=True).run()
    assert result.changes == len(TABLES) * (10 + 10 + 1 + 1)
    assert _y_rows(conn) == 5
    assert_equal(cfg, names)
