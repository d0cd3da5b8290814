"""The source password never leaves binlake: after validate, snapshot, stream and status
(plain and ``--json``) run as a user would run them, with DEBUG logging on, and after failing
runs (a wrong port, a wrong password), the password (as typed and URL-encoded) is in no
output, no log line, no error text, no file of the lake (Delta logs with their commit
metadata, Parquet files, control tables under ``_binlake/``, the writer lock), and no value of
any Delta table there."""

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


def test_password_appears_nowhere(mariadb, db, tmp_path):
    name, conn = db
    user = f"sec_{uuid.uuid4().hex[:6]}"
    with conn.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'%%' IDENTIFIED BY %s", (SECRET,))
        cur.execute(f"GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{user}'@'%'")
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY, label VARCHAR(40))")
        cur.executemany("INSERT INTO items VALUES (%s, %s)", [(i, f"item {i}") for i in range(1, 301)])
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
    files = [p for p in lake.rglob("*") if p.is_file()]
    assert any(p.suffix == ".parquet" for p in files) and any(p.suffix == ".lock" for p in files)
    for p in files:  # raw bytes: JSON logs with commit metadata, lock file, Parquet pages
        data = p.read_bytes()
        assert not any(form.encode() in data for form in FORMS), f"{p} holds the password"
    for t in tables:  # decoded values (Parquet pages may be compressed) and commit history
        dt = DeltaTable(str(t))
        assert not _leaks(json.dumps(dt.history(), default=str)), f"{t}: commit metadata holds the password"
        values = json.dumps(dt.to_pyarrow_table().to_pylist(), default=repr)
        assert not _leaks(values), f"{t}: a value holds the password"
    assert os.environ.get(PASSWORD_VAR) != SECRET  # the test itself passed it to the children only
