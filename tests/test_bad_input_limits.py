"""Bad input at the edges of what MySQL holds, through ``binlake`` as a user runs it (docs/bad-input.md):
text at its limits (bytes that are not UTF-8 in a latin1 column, 4-byte
characters, the longest VARCHAR and BLOB), a type binlake does not map, DDL it cannot parse,
and a captured table dropped while the stream was stopped. Each gives correct data or one
line and its exit code, never a traceback.

Numbers, decimals, floats and temporal values at their type limits (BIGINT UNSIGNED max,
DECIMAL(65,30) ±max, DOUBLE max/min, DATETIME(6) '9999-12-31 23:59:59.999999', '1000-01-01',
TIME ±838:59:59, YEAR 1901/2155) are rows 1 and 2 of the type matrix, tests/test_types.py,
checked through the snapshot, the binlog and the stream."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from deltalake import DeltaTable

from cdc_core.config import load_config
from cdc_core.types import registry
from cdc_core.types.unmapped import UNMAPPED
from pipelines import cli
from pipelines.lake.control_store import ControlStore
from pipelines.lake.tables import table_uri
from pipelines.status import pipeline_status
from tests.helpers import assert_equal, snapshot
from tests.test_cli import PASSWORD_VAR, _lines, assert_clean, run_cli, write_config

# Bytes that are not UTF-8 (a lone lead byte, 0xFF, a continuation byte alone) stored in a latin1
# column, and the five bytes cp1252 leaves undefined (MariaDB's latin1 maps them to C1 controls).
LATIN1_BYTES, LATIN1_TEXT = "c328ff80e9a0", "Ã(ÿ€é\xa0"
LATIN1_C1_BYTES, LATIN1_C1_TEXT = "818d8f909d", "\x81\x8d\x8f\x90\x9d"
FOUR_BYTE = "😀𝄞🀄"  # outside the BMP: utf8mb4 only


@pytest.fixture
def cli_config(mariadb, tmp_path, monkeypatch):
    """A factory: the config file for the test database, and the config it loads (its password
    in this process's environment too, for the in-process snapshot and comparisons)."""
    monkeypatch.setenv(PASSWORD_VAR, mariadb.password)

    def make(name: str, lake: str = "", **source):
        """``lake``: a directory of its own (its own config file and lake), for a second pipeline."""
        (tmp_path / lake).mkdir(exist_ok=True)
        path = write_config(tmp_path / lake, mariadb, name, **source)
        return path, load_config(path)

    return make


def _set_pipeline(path: str, **pipeline) -> None:
    raw = yaml.safe_load(Path(path).read_text())
    raw["pipeline"].update(pipeline)
    Path(path).write_text(yaml.safe_dump(raw))


def _stream(mariadb, path: str):
    r = run_cli("stream", "-c", path, "--until", "now", password=mariadb.password)
    assert_clean(r, mariadb.password)
    return r


def _rows(cfg, table: str) -> dict:
    return {r["id"]: r for r in DeltaTable(table_uri(cfg.sink.path, table)).to_pyarrow_table().to_pylist()}


def test_text_at_its_limits_snapshot_and_stream(mariadb, db, spark, cli_config):
    """Bytes that are not UTF-8 in a latin1 column, 4-byte characters in utf8mb4, a VARCHAR
    filled to the row-size limit with 4-byte characters, a BLOB and a TEXT at 65,535 bytes:
    Delta holds what MySQL returns, through the snapshot and through ``binlake stream``."""
    name, conn = db
    blob, text = bytes(range(256)) * 255 + bytes(range(255)), "é" * 32767 + "x"  # 65,535 bytes each
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, l1 VARCHAR(20) CHARACTER SET latin1, "
                    "u VARCHAR(20) CHARACTER SET utf8mb4, bl BLOB, tx TEXT)")
        cur.execute("CREATE TABLE v (id INT PRIMARY KEY, vc VARCHAR(16382) CHARACTER SET utf8mb4)")  # 65,528 bytes
        ins = f"INSERT INTO t VALUES (%s, CONVERT(X'{LATIN1_BYTES}' USING latin1), %s, %s, %s)"
        cur.execute(ins, (1, FOUR_BYTE, blob, text))
        cur.execute("INSERT INTO v VALUES (1, REPEAT('😀', 16382))")
    path, cfg = cli_config(name)
    snapshot(cfg, spark)
    with conn.cursor() as cur:
        cur.execute(ins, (2, FOUR_BYTE, blob, text))
        cur.execute(f"UPDATE t SET l1 = CONVERT(X'{LATIN1_C1_BYTES}' USING latin1), u = CONCAT(u, '🎉') WHERE id = 1")
        cur.execute("INSERT INTO v VALUES (2, REPEAT('𝄞', 16382))")
        cur.execute("SELECT id, l1, u FROM t ORDER BY id")
        mysql = cur.fetchall()
    assert mysql == ((1, LATIN1_C1_TEXT, FOUR_BYTE + "🎉"), (2, LATIN1_TEXT, FOUR_BYTE))  # what MySQL returns
    r = _stream(mariadb, path)
    assert r.returncode == 0 and "3 changes" in r.stdout, r.stderr
    t, v = _rows(cfg, f"{name}.t"), _rows(cfg, f"{name}.v")
    assert [(i, t[i]["l1"], t[i]["u"], t[i]["_cdc_op"]) for i in (1, 2)] == [
        (1, LATIN1_C1_TEXT, FOUR_BYTE + "🎉", "u"), (2, LATIN1_TEXT, FOUR_BYTE, "c")]
    assert all(t[i]["bl"] == blob and t[i]["tx"] == text for i in (1, 2))
    assert v[1]["vc"] == "😀" * 16382 and v[2]["vc"] == "𝄞" * 16382
    assert_equal(cfg, [f"{name}.t", f"{name}.v"])


def test_a_type_binlake_does_not_map(mariadb, db, spark, cli_config, monkeypatch, capsys):
    """A column of a type binlake does not map, at the snapshot and added by a DDL the stream
    reads: one line naming the column and the source.exclude_columns entry that leaves it
    out, exit 2, for validate, snapshot and stream; with that entry, both go on.
    MariaDB 10.11 has no type binlake does not map (VECTOR is 11.7's; MYSQL_JSON cannot be
    created), so INET4, its codec replaced by the one of unmapped types, stands in for one: the
    CLI runs in this process (as tests/test_cli.py's exit-1 test), everything else is the real
    server."""
    name, conn = db
    monkeypatch.setitem(registry.BY_DATA_TYPE, "inet4", UNMAPPED)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE n (id INT PRIMARY KEY, a INET4)")
        cur.execute("CREATE TABLE m (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO n VALUES (1, '10.0.0.1')")
        cur.execute("INSERT INTO m VALUES (1, 1)")

    def run(*args: str) -> tuple[int, list[str]]:
        code = cli.main(list(args))
        out = capsys.readouterr()
        assert "Traceback" not in out.out + out.err
        return code, _lines(out.err)

    path, _ = cli_config(name)
    for command in (["validate"], ["snapshot"], ["stream", "--until", "now"]):
        code, lines = run(command[0], "-c", path, *command[1:])
        assert code == 2, (command, lines)
        assert lines == [f"✗ {name}.n: column 'a' has type inet4, which binlake does not map; "
                         rf"add '{name}\.n\.a' to source.exclude_columns to leave it out"], command

    path, cfg = cli_config(name, exclude_columns=[rf"{name}\.n\.a"])
    assert run("snapshot", "-c", path)[0] == 0
    assert list(_rows(cfg, f"{name}.n")[1]) == ["id", "_cdc_op", "_cdc_seq"]
    assert run("stream", "-c", path, "--until", "now")[0] == 0  # the stream's baseline
    with conn.cursor() as cur:
        cur.execute("ALTER TABLE m ADD COLUMN a INET4")
        cur.execute("INSERT INTO m VALUES (2, 2, '1.2.3.4')")
    for _ in range(2):  # refused where it stands, again on a re-run: nothing after the DDL is written
        code, lines = run("stream", "-c", path, "--until", "now")
        assert code == 2 and lines == [f"✗ {name}.m: column 'a' has type inet4, which binlake does not map; "
                                       rf"add '{name}\.m\.a' to source.exclude_columns to leave it out"]
        assert sorted(_rows(cfg, f"{name}.m")) == [1]
    path, cfg = cli_config(name, exclude_columns=[rf"{name}\.[nm]\.a"])
    assert run("stream", "-c", path, "--until", "now")[0] == 0
    row = _rows(cfg, f"{name}.m")[2]
    assert (row["id"], row["v"], row["_cdc_op"], "a" in row) == (2, 2, "c", False)
    assert_equal(cfg, [f"{name}.m", f"{name}.n"])


UNPARSABLE = "ALTER TABLE u ADD COLUMN w VARCHAR(3) DEFAULT _latin1 0x41"  # the server takes it, binlake's parser not


def test_ddl_binlake_cannot_parse(mariadb, db, spark, cli_config):
    """A DDL on a captured table that binlake's parser cannot read (MariaDB accepts it): under
    ``lenient`` (the default) it is recorded as ``unparsed``, the column shows in the next table
    map, the rows Delta already had are backfilled, and Delta equals MySQL (exit 0); under
    ``exception`` the stream stops on one line quoting the statement (exit 1), on every re-run."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE u (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO u VALUES (1, 1)")
    path, cfg = cli_config(name)
    snapshot(cfg, spark)
    assert _stream(mariadb, path).returncode == 0  # the stream's baseline, before the DDL
    with conn.cursor() as cur:
        cur.execute(UNPARSABLE)
        cur.execute("INSERT INTO u (id, v) VALUES (2, 2)")
    r = _stream(mariadb, path)
    assert r.returncode == 0, r.stderr
    assert "DDL at binlog" in r.stderr and "not understood, recorded in the schema history" in r.stderr
    history = ControlStore.of(cfg).schema_history()
    assert [(e.table, e.ddl) for e in history if e.status == "unparsed"] == [(f"{name}.u", UNPARSABLE)]
    assert {i: row["w"] for i, row in _rows(cfg, f"{name}.u").items()} == {1: "A", 2: "A"}
    assert_equal(cfg, [f"{name}.u"])

    # Under exception: one line, exit 1, and the same on a re-run (the DDL is never passed over).
    path, _ = cli_config(name, "exception", startup={"mode": "latest"})
    _set_pipeline(path, schema_change_behavior="exception")
    assert _stream(mariadb, path).returncode == 0
    with conn.cursor() as cur:
        cur.execute("INSERT INTO u VALUES (3, 3, 'x')")
        cur.execute(UNPARSABLE.replace("ADD COLUMN w", "ADD COLUMN w2"))
        cur.execute("INSERT INTO u (id) VALUES (4)")
    for _ in range(2):
        r = _stream(mariadb, path)
        assert r.returncode == 1
        (line,) = _lines(r.stderr)
        assert line.startswith(f"error: schema_change_behavior is exception and the DDL on {name}.u at binlog.")
        assert line.endswith("cannot be parsed: " + UNPARSABLE.replace("ADD COLUMN w", "ADD COLUMN w2"))
    assert sorted(_rows(load_config(path), f"{name}.u")) == [3]  # the row before the DDL, nothing after


def test_captured_table_dropped_while_stopped(mariadb, db, spark, cli_config):
    """A captured table dropped while the stream was stopped: the restarted stream applies the
    changes before the DROP, reads the DROP from the binlog and stops capturing the table (its
    Delta table is kept, with the rows MySQL had, and ``status`` says so), the other tables go
    on; a table created again under that name is captured from its CREATE TABLE, its Delta
    table replaced by the new one (exit 0 throughout)."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v INT)")
        cur.execute("CREATE TABLE b (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO a VALUES (1, 1), (2, 2)")
        cur.execute("INSERT INTO b VALUES (1, 1)")
    path, cfg = cli_config(name)
    snapshot(cfg, spark)
    assert _stream(mariadb, path).returncode == 0
    with conn.cursor() as cur:
        cur.execute("INSERT INTO a VALUES (3, 3)")
        cur.execute("UPDATE a SET v = 20 WHERE id = 2")
        cur.execute("DROP TABLE a")
        cur.execute("INSERT INTO b VALUES (2, 2)")
    r = _stream(mariadb, path)
    assert r.returncode == 0 and "3 changes" in r.stdout, r.stderr
    assert {i: row["v"] for i, row in _rows(cfg, f"{name}.a").items()} == {1: 1, 2: 20, 3: 3}  # as dropped
    (drop,) = [e for e in ControlStore.of(cfg).schema_history() if e.kind == "drop_table"]
    assert drop.table == f"{name}.a" and drop.status == "recorded" and "Delta table is kept" in drop.detail
    phases = {t["table"]: t["phase"] for t in pipeline_status(cfg)["tables"]}
    assert phases[f"{name}.a"] == f"not captured since {drop.position} ({drop.description}); Delta table kept"
    assert phases[f"{name}.b"].startswith("streaming")
    assert_equal(cfg, [f"{name}.b"])

    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, w VARCHAR(5))")
        cur.execute("INSERT INTO a VALUES (9, 'new')")
    assert _stream(mariadb, path).returncode == 0
    assert list(_rows(cfg, f"{name}.a")) == [9]
    assert pipeline_status(cfg)["tables"][0]["phase"].startswith("streaming")
    assert_equal(cfg, [f"{name}.a", f"{name}.b"])


def test_table_dropped_and_created_again_outside_the_binlog(mariadb, db, cli_config):
    """Dropped and created again with other columns while the stream was stopped, with
    ``sql_log_bin = 0`` (no DDL in the binlog): its next table map differs from the schema
    history, so the table is backfilled online; Delta equals MySQL (no row of the old table
    left), the old column kept as lenient keeps a dropped one (exit 0)."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v INT)")
    path, cfg = cli_config(name, startup={"mode": "latest"})
    assert _stream(mariadb, path).returncode == 0
    with conn.cursor() as cur:
        cur.execute("INSERT INTO a VALUES (1, 1), (2, 2)")
    assert _stream(mariadb, path).returncode == 0
    with conn.cursor() as cur:
        cur.execute("SET sql_log_bin = 0")
        cur.execute("DROP TABLE a")
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, w VARCHAR(3))")
        cur.execute("SET sql_log_bin = 1")
        cur.execute("INSERT INTO a VALUES (5, 'x')")
    r = _stream(mariadb, path)
    assert r.returncode == 0 and "differs from the schema history (new columns w; missing columns v)" in r.stderr
    assert {i: (row["v"], row["w"]) for i, row in _rows(cfg, f"{name}.a").items()} == {5: (None, "x")}
    (diverged,) = [e for e in ControlStore.of(cfg).schema_history() if e.status == "diverged"]
    assert diverged.needs_backfill
    assert [str(q.state) for q in ControlStore.of(cfg).backfills()] == ["done"]
    assert_equal(cfg, [f"{name}.a"])
