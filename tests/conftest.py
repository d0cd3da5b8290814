"""Shared fixtures: one MariaDB server, one Spark session and one S3 endpoint (moto, on
loopback) per test session, a fresh database (and, where asked, a fresh bucket) per test."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

from cdc_core.config import BinlakeConfig, parse_config
from devtools.local_mariadb import LocalMariaDB
from tests.fault_proxy import FaultProxy
from tests.helpers import batches_as_set

_counter = itertools.count()


_SERVER_DEATHS: list[str] = []  # the session server's unexpected exits, with where its log was kept


@pytest.fixture(scope="session")
def mariadb():
    server = LocalMariaDB(server_id=1).start()
    yield server
    server.cleanup()


@pytest.fixture(autouse=True)
def _session_server_alive(request):
    """After each test that used the session's server: if mariadbd exited (a crash, or a test that
    killed it without starting it again), keep its error log, fail the test naming it, and start the
    server again on the same data directory, so one death is reported once instead of failing every
    later test."""
    yield
    if "mariadb" not in request.fixturenames:
        return
    server = request.getfixturevalue("mariadb")
    if server._proc is None or server._proc.poll() is None:
        return
    code = server._proc.returncode
    kept = Path(tempfile.mkdtemp(prefix="binlake-mariadb-exit-")) / "error.log"
    shutil.copy(server.base_dir / "error.log", kept)
    tail = "\n".join(kept.read_text(errors="replace").splitlines()[-25:])
    _SERVER_DEATHS.append(f"{request.node.nodeid}: mariadbd exited ({code}); log kept at {kept}\n{tail}")
    server.start()
    pytest.fail(f"the session's MariaDB exited ({code}) during this test; its log: {kept}\n{tail}", pytrace=False)


@pytest.fixture(scope="session")
def spark():
    from pipelines.spark.session import get_spark

    session = get_spark("local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 API on a free loopback port, in its own process (tests/s3_endpoint.py), with
    random credentials."""
    from tests.s3_endpoint import S3Server

    server = S3Server.start()
    yield server
    server.stop()


@pytest.fixture
def s3_sink(s3_server, request) -> dict:
    """A fresh bucket; the ``sink`` config section of a lake at ``s3://<bucket>/lake`` in it."""
    bucket = s3_server.create_bucket(f"t{next(_counter)}-{uuid.uuid4().hex[:12]}")
    return {"path": f"s3://{bucket}/lake", "storage_options": s3_server.storage_options()}


@pytest.fixture
def proxy(mariadb):
    """A TCP fault proxy in front of the test server (tests/fault_proxy.py)."""
    with FaultProxy(mariadb.port) as p:
        yield p


@pytest.fixture
def db(mariadb):
    """A fresh utf8mb4 database; yields (name, autocommit pymysql connection)."""
    name = f"t{next(_counter)}_{uuid.uuid4().hex[:6]}"
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}` DEFAULT CHARSET utf8mb4")
    conn.select_db(name)
    yield name, conn
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    conn.close()


@pytest.fixture
def make_config(mariadb, tmp_path: Path):
    """Build a validated config for the test server; keyword overrides per section."""

    def build(database: str, *, chunk_size: int = 100, parallelism: int = 2, server_id: int | None = None,
              **sections) -> BinlakeConfig:
        os.environ["BINLAKE_TEST_PASSWORD"] = mariadb.password
        raw = {
            "pipeline": {"name": f"test_{database}", "parallelism": parallelism},
            "source": {
                "host": mariadb.host, "port": mariadb.port, "user": "root", "password": mariadb.password,
                "server_id": server_id or 1000 + 10 * (next(_counter) % 500),
                "tables": [rf"{database}\..*"], "snapshot": {"chunk_size": chunk_size},
            },
            "sink": {"path": str(tmp_path / "lake")},
        }
        for section, values in sections.items():
            if isinstance(values, list):  # routes: a list, not a mapping
                raw[section] = values
            else:
                raw.setdefault(section, {}).update(values)
        if "stream" in raw:
            raw["stream"] = batches_as_set(raw["stream"])
        return parse_config(raw)

    return build


# The quick tier (`make test-quick`, `-m quick`): the most coverage per second for the edit-test
# loop: the engine's parts without a server, and the server-backed tests of the config, the DDL
# parser, chunking, the binlog event loop, GTIDs and the flavours, the schema registry and the two
# oracles, that need no Spark and take seconds each. A file's name marks all of its tests,
# "file::test" one. The whole suite (`make test`) stays what CI runs.
QUICK = {
    "test_backfill_parts.py", "test_backfill_wait.py", "test_codecs.py", "test_delta_apply.py",
    "test_engine_parts.py", "test_handoff.py", "test_lake_requests.py", "test_mysql_corpus.py",
    "test_schema_history.py", "test_startup_gtid.py", "test_table_batch.py", "test_visibility.py",
    "test_config.py", "test_ddl_parse.py", "test_binlog_decoder.py", "test_chunking.py", "test_chunk_reader.py",
    "test_event_loop.py", "test_gtid.py", "test_flavour.py", "test_failover_parts.py", "test_schema_registry.py",
    "test_oracle.py", "test_change_count.py", "test_validate_mysql.py", "test_watermarks.py",
}


def pytest_collection_modifyitems(items) -> None:
    """Marks the tests of QUICK ``quick``."""
    for item in items:
        name = Path(item.path).name
        if name in QUICK or f"{name}::{item.originalname}" in QUICK:
            item.add_marker(pytest.mark.quick)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A test of a module with a random ``SEED`` carries it: as a property (in a JUnit XML report)
    and, when it fails, as a section of the failure, with the variable that replays it."""
    report = yield
    seed = getattr(item.module, "SEED", None)
    if seed is not None and report.when == "call":
        var = getattr(item.module, "SEED_VAR", None)
        item.user_properties.append(("seed", seed))
        if report.failed:
            report.sections.append(("seed", f"SEED = {seed}" + (f" (replay: {var}={seed})" if var else "")))
    return report


def pytest_sessionfinish(session) -> None:
    """Under pytest-xdist, a worker hands its row-by-row tally and server deaths to the controller."""
    from tests.helpers import COMPARED

    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["compared"] = dict(COMPARED)
        workeroutput["server_deaths"] = list(_SERVER_DEATHS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """The controller adds up what each worker handed over (pytest_sessionfinish)."""
    from tests.helpers import COMPARED

    output = getattr(node, "workeroutput", {})
    for key, value in output.get("compared", {}).items():
        COMPARED[key] += value
    _SERVER_DEATHS.extend(output.get("server_deaths", []))


FAILURE_TAIL_LINES = 12  # of each failure's traceback, repeated at the very end of the output


def pytest_terminal_summary(terminalreporter) -> None:
    """The session's row-by-row proof in one line, and any unexpected exit of its MariaDB. Each
    failure's last traceback lines again, last: where a log is cut in the middle (a CI page), its
    end still says where each failing test stopped (a test that timed out: the call it waited in)."""
    from tests.helpers import COMPARED

    for death in _SERVER_DEATHS:
        terminalreporter.write_line(f"session MariaDB exited after {death}", red=True)
    for report in terminalreporter.stats.get("failed", []):
        lines = [line for line in str(report.longrepr).splitlines() if line.strip()]
        terminalreporter.write_line(f"failed: {report.nodeid}, its traceback's end:", red=True)
        for line in lines[-FAILURE_TAIL_LINES:]:
            terminalreporter.write_line(f"  {line[:200]}")

    if COMPARED["tables"]:
        terminalreporter.write_line(f"Delta = MySQL row by row: {COMPARED['tables']} table comparisons, "
                                    f"{COMPARED['rows']:,} rows, every one equal")
