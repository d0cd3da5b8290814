"""TLS to the source (``source.ssl``): a MariaDB started with a certificate from a CA made here
with openssl, and a user created ``REQUIRE SSL``, so a connection without TLS is refused by the
server itself. The snapshot (Spark tasks) and the stream work over verified TLS; a wrong CA, a
host the certificate does not name, and a missing ``source.ssl`` for such a user are refused by
``validate`` with one clear line (exit 2); ``verify: false`` encrypts without checking, only when
said. The pymysql reader that TLS chunk reads use returns what connectorx returns, type by type."""

from __future__ import annotations

import ssl
import subprocess
import uuid
from pathlib import Path

import pyarrow as pa
import pymysql
import pytest

from cdc_core.chunks.bulk_read import chunk_fetch, text_fetch
from cdc_core.chunks.planning import Chunk
from cdc_core.chunks.reader import chunk_select_sql
from cdc_core.config import load_config, parse_config
from cdc_core.schema.table import describe_table
from cdc_core.source.connection import ConnectionSettings, TlsSettings, connect, connection_settings
from cdc_core.types.mapping import snapshot_array
from devtools.local_mariadb import LocalMariaDB
from tests.helpers import assert_equal, snapshot
from tests.test_cli import PASSWORD_VAR, run_cli, write_config

USER, PASSWORD = "tls_cdc", "Tls-Pw-7b1c9e"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d: Path, name: str) -> tuple[Path, Path]:
    """A self-signed CA: (certificate, key)."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
             "-keyout", f"{name}-key.pem", "-out", f"{name}.pem", cwd=d)
    return d / f"{name}.pem", d / f"{name}-key.pem"


def make_cert(d: Path, name: str, ca: tuple[Path, Path], san: str) -> tuple[Path, Path]:
    """A certificate for ``san`` signed by ``ca``: (certificate, key)."""
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}-key.pem",
             "-out", f"{name}.csr", cwd=d)
    (d / f"{name}.ext").write_text(f"subjectAltName={san}\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
             "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=d)
    return d / f"{name}.pem", d / f"{name}-key.pem"


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    """MariaDB with TLS (certificate for IP 127.0.0.1 only) and a REQUIRE SSL user; yields
    (server, certificate folder)."""
    d = tmp_path_factory.mktemp("tls")
    ca = make_ca(d, "ca")
    make_ca(d, "other-ca")
    cert, key = make_cert(d, "server", ca, "IP:127.0.0.1")
    server = LocalMariaDB(extra_args=(f"--ssl-ca={ca[0]}", f"--ssl-cert={cert}", f"--ssl-key={key}",
                                      "--innodb-buffer-pool-size=64M")).start()
    try:
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE USER '{USER}'@'%%' IDENTIFIED BY %s REQUIRE SSL", (PASSWORD,))
            cur.execute(f"GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{USER}'@'%'")
            cur.execute("SHOW VARIABLES LIKE 'have_ssl'")
            assert cur.fetchone()[1] == "YES", "the server did not enable TLS"
        yield server, d
    finally:
        server.cleanup()


@pytest.fixture
def tls_db(tls_server):
    server, _ = tls_server
    name = f"tls_{uuid.uuid4().hex[:8]}"
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name} DEFAULT CHARSET utf8mb4")
        cur.execute(f"CREATE TABLE {name}.items (id INT PRIMARY KEY, label VARCHAR(40), price DECIMAL(10,2))")
        cur.executemany(f"INSERT INTO {name}.items VALUES (%s, %s, %s)",
                        [(i, f"item {i} ✓", i * 1.25) for i in range(1, 401)])
    return name


def _config(server: LocalMariaDB, database: str, tmp_path: Path, ssl: dict | None, **source):
    raw = {
        "pipeline": {"name": f"tls_{database}", "parallelism": 2},
        "source": {"host": server.host, "port": server.port, "user": USER, "password": PASSWORD,
                   "server_id": 7800, "tables": [rf"{database}\..*"], "snapshot": {"chunk_size": 50}, **source},
        "sink": {"path": str(tmp_path / "lake")},
    }
    if ssl is not None:
        raw["source"]["ssl"] = ssl
    return parse_config(raw)


def _validate(tmp_path: Path, server: LocalMariaDB, database: str, **source):
    path = write_config(tmp_path, server, database, user=USER, **source)
    return run_cli("validate", "-c", path, password=PASSWORD)


def test_snapshot_and_stream_over_verified_tls(tls_server, tls_db, tmp_path, spark):
    from pipelines.stream import StreamEngine

    server, certs = tls_server
    cfg = _config(server, tls_db, tmp_path, {"ca": str(certs / "ca.pem")})
    with connect(connection_settings(cfg)) as conn, conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_version'")
        assert cur.fetchone()[1].startswith("TLS")  # the control connection is encrypted
    # The user is REQUIRE SSL: every connection of the snapshot (Spark tasks' chunk reads and
    # watermarks, the binlog window) and of the stream must be TLS, or the server refuses it.
    summary = snapshot(cfg, spark)
    assert summary.tables[0].chunks >= 8 and summary.tables[0].rows_written == 400
    assert_equal(cfg, [f"{tls_db}.items"])
    with server.connect(tls_db) as conn, conn.cursor() as cur:
        cur.execute("UPDATE items SET label = 'changed' WHERE id <= 100")
        cur.execute("DELETE FROM items WHERE id > 350")
        cur.executemany("INSERT INTO items VALUES (%s, %s, %s)", [(i, "new", 1) for i in range(1000, 1050)])
    result = StreamEngine(cfg, until_now=True).run()
    assert result.changes == 100 + 50 + 50
    assert_equal(cfg, [f"{tls_db}.items"])


def test_wrong_ca_is_refused(tls_server, tls_db, tmp_path):
    server, certs = tls_server
    r = _validate(tmp_path, server, tls_db, ssl={"ca": str(certs / "other-ca.pem")})
    assert r.returncode == 2
    (line,) = [x for x in r.stderr.splitlines() if x.strip()]
    assert "TLS" in line and "certificate verify failed" in line and "source.ssl" in line
    assert "Traceback" not in r.stderr and PASSWORD not in r.stdout + r.stderr


def test_host_not_named_by_the_certificate_is_refused_unless_hostname_check_is_off(tls_server, tls_db, tmp_path):
    server, certs = tls_server
    ca = str(certs / "ca.pem")
    r = _validate(tmp_path, server, tls_db, host="localhost", ssl={"ca": ca})  # the certificate names 127.0.0.1
    assert r.returncode == 2 and "TLS" in r.stderr and "localhost" in r.stderr, r.stderr
    r = _validate(tmp_path, server, tls_db, host="localhost", ssl={"ca": ca, "check_hostname": False})
    assert r.returncode == 0, r.stderr


def test_unverified_tls_only_when_asked(tls_server, tls_db, tmp_path):
    server, certs = tls_server
    r = _validate(tmp_path, server, tls_db, ssl={"ca": str(certs / "other-ca.pem"), "verify": False})
    assert r.returncode == 0, r.stderr


def test_require_ssl_user_without_ssl_config_is_told_to_set_it(tls_server, tls_db, tmp_path):
    server, _ = tls_server
    r = _validate(tmp_path, server, tls_db)
    assert r.returncode == 2
    assert any("source.ssl" in x and "REQUIRE SSL" in x for x in r.stderr.splitlines()), r.stderr


def test_tls_to_a_server_without_tls_is_refused(mariadb, db, tmp_path):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    path = write_config(tmp_path, mariadb, name, ssl={"verify": False})
    r = run_cli("validate", "-c", path, password=mariadb.password)
    if r.returncode == 0:
        with mariadb.connect() as c, c.cursor() as cur:
            cur.execute("SHOW VARIABLES LIKE 'have_ssl'")
            pytest.skip(f"the session server has TLS on (have_ssl={cur.fetchone()[1]})")
    assert r.returncode == 2 and "TLS" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_text_reader_equals_connectorx_on_the_type_matrix(db, mariadb, make_config):
    """The reader TLS chunk reads use (pymysql, text protocol) gives, after the shared
    snapshot_array fix-ups, exactly what connectorx gives, for every cell of the type matrix."""
    from tests.test_types import load_type_matrix

    name, conn = db
    load_type_matrix(mariadb, conn, name)
    cfg = make_config(name)
    settings = connection_settings(cfg)
    with connect(settings) as c, c.cursor() as cur:
        schema = describe_table(cur, name, "types")
        sql = chunk_select_sql(schema, Chunk(schema.qualified_name, 0, "id", None, None), c.escape)
    fast = chunk_fetch(settings, schema)(sql)
    text = text_fetch(settings, schema, sql)
    assert text.num_rows == fast.num_rows >= 7
    differences = []
    for col in schema.columns:
        a = snapshot_array(col, fast.column(col.name))
        b = snapshot_array(col, text.column(col.name))
        a, b = (pa.chunked_array([x]) if isinstance(x, pa.Array) else x for x in (a, b))
        if a.type != b.type or a.to_pylist() != b.to_pylist():
            differences.append(f"{col.name} ({col.column_type}): connectorx={a.to_pylist()!r} text={b.to_pylist()!r}")
    assert not differences, "\n".join(differences)


def test_connections_without_ssl_config_share_one_preferred_context(mariadb, db, tmp_path, monkeypatch):
    """Without ``source.ssl`` pymysql prefers TLS when the server offers it; the context it
    would build (loading the system's CAs) for every connection is built once per process."""
    name, _ = db
    monkeypatch.setenv(PASSWORD_VAR, mariadb.password)
    cfg = load_config(write_config(tmp_path, mariadb, name))
    settings = connection_settings(cfg)
    first, second = connect(settings), connect(settings)
    with first, second:
        for c in (first, second):
            with c.cursor() as cur:
                cur.execute("SELECT 1")
                assert cur.fetchone() == (1,)
        if getattr(first, "ctx", None) is not None:  # pymysql with a "preferred" mode (2.x)
            assert first.ctx is second.ctx
            assert first.ctx.verify_mode == ssl.CERT_NONE


def test_a_tls_context_is_built_once_until_its_files_change(tls_server, tls_db, tmp_path):
    """A configured context is built once per process (building loads the CAs: ~26 ms a
    connection); a CA file rewritten since (a rotation) is read again by the next connection."""
    server, certs = tls_server
    ca = tmp_path / "ca.pem"
    ca.write_bytes((certs / "ca.pem").read_bytes())
    settings = ConnectionSettings(server.host, server.port, USER, PASSWORD, tls=TlsSettings(ca=str(ca)))
    first = settings.tls.context()
    assert settings.tls.context() is first
    with connect(settings) as conn, conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_version'")
        assert cur.fetchone()[1].startswith("TLS")
        assert conn.ctx is first
    # The file now names a CA that did not sign the server's certificate: the next connection
    # reads it (and is refused), it does not reuse the context built from the old file.
    ca.write_bytes((certs / "other-ca.pem").read_bytes())
    rotated = settings.tls.context()
    assert rotated is not first
    with pytest.raises(pymysql.err.OperationalError, match="certificate verify failed"):
        connect(settings).close()
    ca.write_bytes((certs / "ca.pem").read_bytes())
    with connect(settings) as conn, conn.cursor() as cur:
        cur.execute("SELECT 1")
        assert cur.fetchone() == (1,)
