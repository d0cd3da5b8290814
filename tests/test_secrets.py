"""The source password never leaves binlake: after validate, snapshot, stream and status
(plain and ``--json``) run as a user would run them, with DEBUG logging on, and after failing
runs (a wrong port, a wrong password), the password (as typed and URL-encoded) is in no
output, no log line, no error text, no file of the lake (Delta logs with their commit
metadata, Parquet files, control tables under ``_binlake/``, the writer lock), and no value of
any Delta table there. The stream's metrics endpoint is checked the same way in
tests/test_metrics.py."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from urllib.parse import quote

import yaml
from deltalake import DeltaTable

from tests.test_cli import PASSWORD_VAR, run_cli, write_config

SECRET = "Sekr1t/Pa55:w@rd-" + uuid.uuid4().hex[:8]  # '/', ':' and '@' are URL-encoded in connection URLs
FORMS = (SECRET, quote(SECRET, safe=""), SECRET.encode().hex())


def _delta_tables(lake: Path) -> list[Path]:
    return sorted(p.parent for p in lake.rglob("_delta_log"))


def _leaks(text: str) -> list[str]:
    return [form for form in FORMS if form in text]


def _user_with_items(conn) -> str:
    """A least-privileged user whose password is SECRET, and a table ``items`` of 300 rows."""
    user = f"sec_{uuid.uuid4().hex[:6]}"
    with conn.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'%%' IDENTIFIED BY %s", (SECRET,))
        cur.execute(f"GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{user}'@'%'")
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY, label VARCHAR(40))")
        cur.executemany("INSERT INTO items VALUES (%s, %s)", [(i, f"item {i}") for i in range(1, 301)])
    return user


def _assert_no_file_holds_it(root: Path) -> list[Path]:
    """Every file under ``root``, raw bytes (JSON logs, SQLite pages, Parquet pages, locks); the files."""
    files = [p for p in root.rglob("*") if p.is_file()]
    for p in files:
        data = p.read_bytes()
        assert not any(form.encode() in data for form in FORMS), f"{p} holds the password"
    return files


def test_password_appears_nowhere(mariadb, db, tmp_path):
    name, conn = db
    user = _user_with_items(conn)
    config = write_config(tmp_path, mariadb, name, user=user)
    outputs = []

    def cli(*args: str, password: str = SECRET) -> None:
        r = run_cli("-v", *args, password=password)
        outputs.append((args, r.returncode, r.stdout + r.stderr))

    cli("validate", "-c", config)
    cli("snapshot", "-c", config)
    with conn.cursor() as cur:
        cur.execute("UPDATE items SET label = 'changed' WHERE id <= 50")
        cur.execute("DELETE FROM items WHERE id > 280")
    cli("stream", "-c", config, "--until", "now")
    cli("status", "-c", config)
    cli("status", "-c", config, "--json")
    assert [code for _, code, _ in outputs] == [0] * 5, [(a, c, o[-1500:]) for a, c, o in outputs if c]

    # Failing runs: the password in the environment, the error in the output.
    raw = yaml.safe_load(Path(config).read_text())
    raw["source"]["port"] = 1  # nothing listens there
    bad_port = tmp_path / "bad_port.yaml"
    bad_port.write_text(yaml.safe_dump(raw))
    cli("snapshot", "-c", str(bad_port))
    cli("status", "-c", str(bad_port), "--json")
    cli("stream", "-c", config, "--until", "now", password=SECRET + "-wrong")
    assert [code for _, code, _ in outputs[5:]] == [2, 0, 2]

    for args, _, text in outputs:
        assert not _leaks(text), f"binlake {' '.join(args)} printed the password"

    lake = Path(raw["sink"]["path"])
    tables = _delta_tables(lake)
    assert {p.relative_to(lake).as_posix() for p in tables} >= {f"{name}/items", "_binlake/snapshot_plan",
                                                                "_binlake/snapshot_chunks",
                                                                "_binlake/stream_checkpoint",
                                                                "_binlake/schema_history"}
    files = _assert_no_file_holds_it(lake)
    assert any(p.suffix == ".parquet" for p in files) and any(p.suffix == ".lock" for p in files)
    for t in tables:  # decoded values (Parquet pages may be compressed) and commit history
        dt = DeltaTable(str(t))
        assert not _leaks(json.dumps(dt.history(), default=str)), f"{t}: commit metadata holds the password"
        values = json.dumps(dt.to_pyarrow_table().to_pylist(), default=repr)
        assert not _leaks(values), f"{t}: a value holds the password"
    assert os.environ.get(PASSWORD_VAR) != SECRET  # the test itself passed it to the children only


def test_dagster_runs_hold_no_password(mariadb, db, tmp_path, monkeypatch):
    """The stream job run by Dagster (two bounded runs and one failing on a wrong password) on a
    persistent instance: no event of its runs (materialization metadata, logs, the failure) and
    no file of the instance (run and event storage) holds the password."""
    from dagster import DagsterInstance, serialize_value

    from cdc_core.config import load_config
    from orchestration.build import build_binlake_definitions
    from pipelines.source_catalog import discover

    name, conn = db
    user = _user_with_items(conn)
    config = write_config(tmp_path, mariadb, name, user=user, startup={"mode": "latest"})
    monkeypatch.setenv(PASSWORD_VAR, SECRET)  # what Dagster's code location has in its environment
    discover(load_config(config)).write(tmp_path / "tables.json")
    job = build_binlake_definitions(config, tmp_path / "tables.json").resolve_job_def("binlake_stream")
    run_config = {"ops": {"stream_binlog": {"config": {"continuous": False}}}}
    home = tmp_path / "dagster_home"
    home.mkdir()
    with DagsterInstance.local_temp(str(home)) as instance:
        first = job.execute_in_process(instance=instance, run_config=run_config)  # starts at the binlog end
        with conn.cursor() as cur:
            cur.execute("UPDATE items SET label = 'changed' WHERE id <= 50")
        second = job.execute_in_process(instance=instance, run_config=run_config)
        monkeypatch.setenv(PASSWORD_VAR, SECRET + "-wrong")
        failed = job.execute_in_process(instance=instance, run_config=run_config, raise_on_error=False)
        events = [serialize_value(r) for run in instance.get_runs() for r in instance.all_logs(run.run_id)]
    assert first.success and second.success and not failed.success
    assert any(m.metadata for m in second.asset_materializations_for_node("stream_binlog"))
    text = "\n".join(events)
    assert "binlake/binlog_file" in text and "Access denied" in text  # the metadata and the failure are there
    assert not _leaks(text), "a Dagster event holds the password"
    assert any(p.suffix == ".db" for p in _assert_no_file_holds_it(home))
    _assert_no_file_holds_it(tmp_path / "lake")
