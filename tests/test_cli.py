"""The ``binlake`` command line as a user runs it (a subprocess): exit codes 0 / 2 / 1,
one clear line per problem, no tracebacks, no secrets in the output."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from cdc_core.config import load_config
from devtools.local_mariadb import LocalMariaDB
from pipelines.snapshot.verify import finished_snapshot
from tests.helpers import assert_equal

BINLAKE = str(Path(sys.executable).with_name("binlake")) if Path(sys.executable).with_name("binlake").exists() \
    else shutil.which("binlake")
PASSWORD_VAR = "BINLAKE_CLI_TEST_PASSWORD"


def run_cli(*args: str, password: str, timeout: float = 300, columns: str | None = "200"
            ) -> subprocess.CompletedProcess:
    """Run ``binlake`` with stdout a pipe; ``columns`` None runs it with COLUMNS unset."""
    env = {**os.environ, PASSWORD_VAR: password, "COLUMNS": columns}
    if columns is None:
        del env["COLUMNS"]
    return subprocess.run([BINLAKE, *args], capture_output=True, text=True, env=env, timeout=timeout)


def write_config(tmp_path: Path, server: LocalMariaDB, database: str, *, user: str = "root", **source) -> str:
    """A config file for ``server``; the password always comes from the environment."""
    raw = {
        "pipeline": {"name": f"cli_{database}", "parallelism": 2},
        "source": {"host": server.host, "port": server.port, "user": user, "password": f"${{{PASSWORD_VAR}}}",
                   "server_id": 7100, "tables": [rf"{database}\..*"], "snapshot": {"chunk_size": 100}, **source},
        "sink": {"path": str(tmp_path / "lake")},
        "spark": {"master": "local[2]"},
    }
    path = tmp_path / "binlake.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


@pytest.fixture
def items(db):
    """The test database with a small table ``items`` (primary key)."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY, label VARCHAR(30), price DECIMAL(10,2))")
        cur.executemany("INSERT INTO items VALUES (%s, %s, %s)", [(i, f"item {i}", i * 0.5) for i in range(1, 301)])
    return name, conn


@pytest.fixture
def make_user(mariadb):
    """Create a server user with the given grants; yields a factory returning (user, password)."""
    created = []

    def make(*grants: str) -> tuple[str, str]:
        user, password = f"u_{uuid.uuid4().hex[:8]}", f"Pw-{uuid.uuid4().hex}"
        with mariadb.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE USER '{user}'@'%%' IDENTIFIED BY %s", (password,))
            for g in grants:
                cur.execute(f"GRANT {g} ON *.* TO '{user}'@'%'")
        created.append(user)
        return user, password

    yield make
    with mariadb.connect() as conn, conn.cursor() as cur:
        for user in created:
            cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def assert_clean(result: subprocess.CompletedProcess, *secrets: str) -> None:
    both = result.stdout + result.stderr
    assert "Traceback" not in both, both
    for s in secrets:
        assert s not in both, "secret leaked into the output"


def test_validate_ok_with_minimal_privileges(mariadb, items, make_user, tmp_path):
    name, _ = items
    user, password = make_user("SELECT", "REPLICATION SLAVE", "REPLICATION CLIENT")
    r = run_cli("validate", "-c", write_config(tmp_path, mariadb, name, user=user), password=password)
    assert r.returncode == 0, r.stderr
    assert "ready for binlake" in r.stdout
    assert r.stderr == ""
    assert_clean(r, password)


def test_validate_typo_key(mariadb, items, tmp_path):
    name, _ = items
    r = run_cli("validate", "-c", write_config(tmp_path, mariadb, name, snapshott={"chunk_size": 5}),
                password=mariadb.password)
    assert r.returncode == 2
    assert "source.snapshott" in r.stderr and "unknown key" in r.stderr
    assert len(_lines(r.stderr)) == 1
    assert_clean(r, mariadb.password)


def test_validate_missing_config_file(tmp_path):
    r = run_cli("validate", "-c", str(tmp_path / "nope.yaml"), password="x")
    assert r.returncode == 2 and "cannot read config file" in r.stderr
    assert_clean(r)


def test_validate_wrong_password(mariadb, items, tmp_path):
    name, _ = items
    wrong = "Wr0ng-Pa55-quokka-4417"
    r = run_cli("validate", "-c", write_config(tmp_path, mariadb, name), password=wrong)
    assert r.returncode == 2
    (line,) = _lines(r.stderr)  # one clear line
    assert "access denied" in line.lower() and "source.password" in line
    assert r.stdout == ""
    assert_clean(r, wrong)


def test_validate_table_without_primary_key(mariadb, items, tmp_path):
    name, conn = items
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE audit_log (at DATETIME NOT NULL, msg VARCHAR(50))")
    # No key at all: read whole in one consistent snapshot, so nothing to configure.
    r = run_cli("validate", "-c", write_config(tmp_path, mariadb, name), password=mariadb.password)
    assert r.returncode == 0, r.stderr
    assert_clean(r, mariadb.password)

    # A configured chunk key must be NOT NULL: a nullable one is named as the problem.
    cfg = write_config(tmp_path, mariadb, name, snapshot={"chunk_key_columns": {f"{name}.audit_log": "msg"}})
    r = run_cli("validate", "-c", cfg, password=mariadb.password)
    assert r.returncode == 2
    (line,) = _lines(r.stderr)
    assert f"{name}.audit_log" in line and "msg" in line
    cfg = write_config(tmp_path, mariadb, name, snapshot={"chunk_key_columns": {f"{name}.audit_log": "at"}})
    r = run_cli("validate", "-c", cfg, password=mariadb.password)
    assert r.returncode == 0, r.stderr


def _printed_grants(line: str) -> list[str]:
    """The GRANT statements a validate line tells the user to run."""
    return [g.strip() + ";" for g in line.split("run: ", 1)[1].split(";") if g.strip()]


def test_validate_prints_the_grant_to_run_and_it_works(mariadb, items, make_user, tmp_path):
    name, _ = items
    user, password = make_user("SELECT")
    config = write_config(tmp_path, mariadb, name, user=user)
    r = run_cli("validate", "-c", config, password=password)
    assert r.returncode == 2
    (line,) = _lines(r.stderr)  # one line, one statement for both missing privileges
    assert f"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{user}'@'%';" in line
    assert_clean(r, password)
    with mariadb.connect() as conn, conn.cursor() as cur:
        for grant in _printed_grants(line):
            cur.execute(grant)  # exactly as printed
    r = run_cli("validate", "-c", config, password=password)
    assert r.returncode == 0, r.stderr


def test_least_privilege_user_snapshots_and_streams(mariadb, items, make_user, tmp_path, monkeypatch):
    """SELECT on the captured database only, REPLICATION SLAVE and BINLOG MONITOR: validate
    prints the missing SELECT grant for that database; with it, snapshot and stream work."""
    name, conn = items
    user, password = make_user("REPLICATION SLAVE", "BINLOG MONITOR")
    config = write_config(tmp_path, mariadb, name, user=user)
    r = run_cli("validate", "-c", config, password=password)
    assert r.returncode == 2
    line = next(x for x in _lines(r.stderr) if "lacks SELECT" in x)
    assert _printed_grants(line) == [f"GRANT SELECT ON `{name}`.* TO '{user}'@'%';"]
    with mariadb.connect() as c, c.cursor() as cur:
        cur.execute(_printed_grants(line)[0])
    r = run_cli("snapshot", "-c", config, password=password)
    assert r.returncode == 0, r.stderr[-2000:]
    with conn.cursor() as cur:
        cur.execute("UPDATE items SET label = 'least' WHERE id <= 10")
        cur.execute("DELETE FROM items WHERE id > 290")
    r = run_cli("stream", "-c", config, "--until", "now", password=password)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "20 changes" in r.stdout
    assert_clean(r, password)
    monkeypatch.setenv(PASSWORD_VAR, password)
    assert_equal(load_config(config), [f"{name}.items"])


def test_validate_binlog_off(tmp_path):
    with LocalMariaDB(binlog=False, extra_args=("--innodb-buffer-pool-size=64M",)) as server:
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE shop DEFAULT CHARSET utf8mb4")
            cur.execute("CREATE TABLE shop.t (id INT PRIMARY KEY)")
        r = run_cli("validate", "-c", write_config(tmp_path, server, "shop"), password=server.password)
    assert r.returncode == 2
    lines = _lines(r.stderr)
    assert any("log_bin" in line and "OFF" in line for line in lines)
    assert any("binlog_format" in line and "ROW" in line for line in lines)
    assert all(line.startswith("✗") for line in lines)
    assert_clean(r, server.password)


def test_snapshot_cli(mariadb, items, tmp_path, monkeypatch):
    name, conn = items
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE tags (k VARCHAR(20), n INT, PRIMARY KEY (k, n))")
        cur.executemany("INSERT INTO tags VALUES (%s, %s)", [(f"k{i % 7}", i) for i in range(150)])
    config = write_config(tmp_path, mariadb, name)
    for _ in ("first", "no-op re-run"):
        r = run_cli("snapshot", "-c", config, password=mariadb.password)
        assert r.returncode == 0, r.stderr[-3000:]
        assert_clean(r, mariadb.password)
        rows = {line.split("│")[1].strip(): line for line in r.stdout.splitlines() if line.count("│") >= 7}
        assert "match" in rows[f"{name}.items"] and "300" in rows[f"{name}.items"]
        assert "match" in rows[f"{name}.tags"] and "150" in rows[f"{name}.tags"]
        assert "differs" not in r.stdout
        # On local[*] the groups run in threads of the binlake process and a finished snapshot
        # is only checked: Spark's JVM, which logs its start, never starts.
        assert "Spark" not in r.stderr, r.stderr[-2000:]
    # Work to do again (a table captured since): the snapshot runs again.
    monkeypatch.setenv(PASSWORD_VAR, mariadb.password)
    cfg = load_config(config)
    assert finished_snapshot(cfg) is not None
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE later (id INT PRIMARY KEY)")
    assert finished_snapshot(cfg) is None


def test_output_a_log_keeps(mariadb, db, tmp_path):
    """stdout a pipe (cron, CI, ``> log``) with COLUMNS unset or 80: the summary keeps every digit;
    ``snapshot --json`` and ``stream --json`` print one JSON object."""
    name, conn = db
    table = "a_table_with_a_name_long_enough_to_squeeze_a_narrow_summary"
    n = 21_234
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT)")
        cur.executemany(f"INSERT INTO {table} VALUES (%s, %s)", [(i, i) for i in range(n)])
    config = write_config(tmp_path, mariadb, name)
    for columns in (None, "80"):  # a run that reads, then a re-run that only checks
        r = run_cli("snapshot", "-c", config, password=mariadb.password, columns=columns)
        assert r.returncode == 0, r.stderr[-3000:]
        (row,) = [line for line in r.stdout.splitlines() if table in line]
        assert "…" not in r.stdout, r.stdout
        cells = [c.strip() for c in row.split("│")[1:-1]]
        assert cells[0] == f"{name}.{table}"
        assert cells[4:7] == [f"{n:,}", f"{n:,}", "match"], row
    r = run_cli("snapshot", "--json", "-c", config, password=mariadb.password, columns="80")
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    (t,) = summary["tables"]
    assert summary["pipeline"] == f"cli_{name}"
    assert (t["table"], t["delta_rows"], t["mysql_rows"], t["matches"]) == (f"{name}.{table}", n, n, True)
    with conn.cursor() as cur:
        cur.execute(f"UPDATE {table} SET v = v + 1 WHERE id < 5")
    r = run_cli("stream", "--until", "now", "--json", "-c", config, password=mariadb.password, columns=None)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    assert summary["changes"] == 5 and summary["tables"] == {f"{name}.{table}": 5}, summary
    assert summary["stop_reason"] and summary["end"]
    assert_clean(r, mariadb.password)


def test_runtime_failure_is_exit_1_one_line_without_secret(mariadb, tmp_path, monkeypatch, capsys):
    """In-process (no subprocess needed): an unexpected error is exit 1, one line, the password masked."""
    import cdc_core.source.validate
    from pipelines import cli

    secret = "Zebra-Secret-90210"
    monkeypatch.setenv(PASSWORD_VAR, secret)

    def explode(cfg):
        raise RuntimeError(f"driver said: mysql://root:{cfg.source.password.get_secret_value()}@host failed")

    monkeypatch.setattr(cdc_core.source.validate, "findings", explode)
    assert cli.main(["validate", "-c", write_config(tmp_path, mariadb, "shop")]) == 1
    captured = capsys.readouterr()
    (line,) = _lines(captured.err)
    assert "RuntimeError" in line and "mysql://root:***@host" in line
    assert secret not in captured.out + captured.err


BAD_CONFIGS = {
    # name: (file text, what the one line must name)
    "malformed YAML": ("pipeline: {name: p\nsource: [", "not valid YAML at line"),
    "wrong type": ("pipeline: {name: p}\nsource: {user: u, port: abc, tables: ['a\\..*']}\n", "source.port"),
    "unset variable": ("pipeline: {name: p}\nsource: {user: u, password: '${BINLAKE_NOT_SET_42}', tables: ['a']}\n",
                       "BINLAKE_NOT_SET_42"),
    "not a mapping": ("- a\n- b\n", "must be a mapping"),
    "wrong ssl key": ("pipeline: {name: p}\nsource: {user: u, tables: ['a'], ssl: {ca_file: x}}\n",
                      "source.ssl.ca_file: unknown key"),
    "wrong maintenance key": ("pipeline: {name: p}\nsource: {user: u, tables: ['a']}\n"
                              "sink: {maintenance: {target_mb: 64}}\n", "sink.maintenance.target_mb: unknown key"),
}


def test_version_prints_the_installed_version():
    from importlib import metadata

    r = run_cli("--version", password="x")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"binlake {metadata.version('binlake')}"


@pytest.mark.parametrize("case", BAD_CONFIGS)
def test_bad_config_is_one_line_exit_2_for_every_command(tmp_path, case):
    text, named = BAD_CONFIGS[case]
    path = tmp_path / "binlake.yaml"
    path.write_text(text)
    for command in ("validate", "snapshot", "stream", "run", "status", "maintain"):
        r = run_cli(command, "-c", str(path), password="x")
        assert r.returncode == 2, (command, r.stderr)
        (line,) = _lines(r.stderr)
        assert named in line and line.startswith("config error"), (command, line)
        assert_clean(r)


def test_maintain_a_table_the_pipeline_does_not_write_is_one_line_exit_2(mariadb, items, tmp_path):
    name, _ = items
    config = write_config(tmp_path, mariadb, name)
    assert run_cli("snapshot", "-c", config, password=mariadb.password).returncode == 0
    r = run_cli("maintain", "-c", config, "--table", f"{name}.nowhere", password=mariadb.password)
    assert r.returncode == 2, r.stderr
    (line,) = _lines(r.stderr)
    assert f"{name}.nowhere" in line and "not a table this pipeline writes" in line, line
    done = run_cli("maintain", "-c", config, "--table", f"{name}.items", password=mariadb.password)
    assert done.returncode == 0, done.stderr
    assert f"{name}.items" in done.stdout and "files before" in done.stdout
    assert_clean(done, mariadb.password)


@pytest.mark.parametrize("host,port", [("127.0.0.1", 1), ("no-such-host.invalid", 3306)], ids=["port", "name"])
def test_unreachable_source_is_one_line_exit_2(mariadb, items, tmp_path, host, port):
    name, _ = items
    path = write_config(tmp_path, mariadb, name, host=host, port=port)
    for command in ("validate", "snapshot", "stream"):
        r = run_cli(command, "-c", path, password=mariadb.password)
        assert r.returncode == 2, (command, r.stderr)
        (line,) = _lines(r.stderr)
        assert f"cannot connect to {host}:{port}" in line, line
        assert_clean(r, mariadb.password)
    r = run_cli("status", "-c", path, password=mariadb.password)  # status still shows the lake's side
    assert r.returncode == 0 and "source not reachable" in r.stderr
    assert_clean(r, mariadb.password)


def test_row_image_and_row_metadata_not_full_are_named(mariadb, items, tmp_path):
    name, _ = items
    path = write_config(tmp_path, mariadb, name)
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SET GLOBAL binlog_row_image = 'MINIMAL'")
        cur.execute("SET GLOBAL binlog_row_metadata = 'MINIMAL'")
        try:
            results = [run_cli(c, "-c", path, password=mariadb.password) for c in ("validate", "stream")]
        finally:
            cur.execute("SET GLOBAL binlog_row_image = 'FULL'")
            cur.execute("SET GLOBAL binlog_row_metadata = 'FULL'")
    for r in results:
        assert r.returncode == 2, r.stderr
        lines = _lines(r.stderr)
        assert len(lines) == 2
        assert "binlog_row_image is MINIMAL" in lines[0] and "SET GLOBAL binlog_row_image = 'FULL'" in lines[0]
        assert "binlog_row_metadata is MINIMAL" in lines[1]
        assert_clean(r, mariadb.password)
