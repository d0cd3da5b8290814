"""Faults in the lake, not in the source: an HTTP fault proxy (tests/s3_fault_proxy.py) between
binlake and the S3 endpoint (moto) injects, into the requests it picks by method and key,
each kind of fault an object store shows:

- ``500``: InternalError answers; ``503``: SlowDown (throttling) answers — delta-rs's object
  store retries both itself (max_retries 10 within retry_timeout 180 s by default); past that,
  binlake retries within its own budget;
- ``timeout``: the store does the write but answers after the client's ``timeout`` storage
  option (3 s here): the client gives up on a write that landed;
- ``slow``: an upload that takes seconds, then succeeds;
- ``reset``: the connection reset after half of the upload (never done by the store);
- ``lost``: the store does the write, then the connection closes before any byte of the
  answer — the worst: the writer cannot know whether its commit landed. delta-rs puts the
  log entry again, finds it taken (412) by its own commit, and refuses to commit again (the
  transaction identifier of a stream commit), or commits the same files again at the next
  version (a snapshot's append, which adds nothing: a table holds a file once);
- ``lost-rst``: the same with a reset: delta-rs gives up at once; binlake finds its commit.

For the snapshot, the stream and an online backfill, each under each fault on its Delta
commits (and on data files, multipart parts, control tables, reads of the log): nothing is
lost and nothing applied twice (Delta equals MySQL row by row; every chunk committed once;
the changes the stream's commits record, counted, equal the binlog's: tests/change_count.py;
stream commits' offsets strictly increase), the run ends as documented (docs/bad-input.md:
a fault that passes never fails it; one outlasting the retry budget stops it, exit 1, naming
the store and the cause) and a re-run resumes. The writer lease, whose commits allow no
retry, recognises its own commit whose answer was lost. Lake maintenance commits (compaction,
vacuum) are not on this branch: ``test_lake_maintenance_under_store_faults`` is the hook.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from cdc_core.chunks.incremental import BackfillState
from cdc_core.errors import TerminalError, is_transient, store_cause
from cdc_core.retry import RetryPolicy
from pipelines.backfill.requests import request_backfill
from pipelines.lake.control_store import ControlStore
from pipelines.lake.files import snapshot_commits
from pipelines.lake.maintenance.maintainer import maintain
from pipelines.lake.tables import table_uri
from pipelines.lake.writer_lock import LeaseLock
from pipelines.snapshot.driver import SnapshotJob
from pipelines.stream import StreamEngine
from pipelines.stream.online_backfill import BACKFILL_KEY
from tests.change_count import assert_changes_counted
from tests.helpers import assert_equal, write_config_file
from tests.s3_fault_proxy import LOG_COMMIT, S3Fault, S3FaultProxy
from tests.test_cli import run_cli
from tests.test_object_store import assert_stream_offsets_increase

FAST = RetryPolicy(delays=(0.2, 0.5, 1.0), budget_seconds=60)
SHORT = RetryPolicy(delays=(0.2, 0.5), budget_seconds=3)  # a store down for longer: the run stops
TIMEOUT = 3.0  # the client's timeout storage option here
# Each fault kind (see the module docstring) as a rule's action and counts.
KINDS = {
    "500": {"action": "error", "status": 500, "code": "InternalError", "times": 2},
    "503": {"action": "error", "status": 503, "code": "SlowDown", "times": 14},  # past delta-rs's 10 retries
    "timeout": {"action": "late", "seconds": TIMEOUT + 2},
    "slow": {"action": "slow", "seconds": 2, "times": 2},
    "reset": {"action": "reset"},
    "lost": {"action": "lost"},
    "lost-rst": {"action": "lost", "rst": True},
}


def fault(kind: str, method: str, path: str, *, query: str = "", skip: int = 0, times: int | None = None) -> S3Fault:
    """A rule injecting fault ``kind`` into the requests ``method`` + ``path`` (+ ``query``) pick."""
    spec = {**KINDS[kind], **({"times": times} if times is not None else {})}
    return S3Fault(method=method, path=path, query=query, skip=skip, **spec)


@pytest.fixture(scope="module")
def s3_proxy(s3_server):
    """The HTTP fault proxy in front of the session's S3 endpoint."""
    with S3FaultProxy.start(s3_server.endpoint) as p:
        yield p


@pytest.fixture
def faulty(s3_server, s3_proxy) -> Lake:
    """A fresh bucket, reached through the fault proxy (no rule armed)."""
    bucket = s3_server.create_bucket(f"f{uuid.uuid4().hex[:16]}")
    s3_proxy.clear()
    direct = s3_server.storage_options()
    yield Lake(f"s3://{bucket}/lake", {**s3_proxy.storage_options(direct), "timeout": f"{TIMEOUT:g}s"}, direct)
    s3_proxy.clear()


@dataclass(frozen=True)
class Lake:
    """A test's lake: its path, the options reaching it through the proxy, and without it."""

    path: str
    options: dict[str, str]
    direct: dict[str, str]

    def sink(self, **extra: str) -> dict:
        return {"path": self.path, "storage_options": {**self.options, **extra}}

    def log(self, database: str, table: str = "t") -> str:
        """The path regex of a Delta table's commits (its log entries) in this lake."""
        bucket_and_folder = self.path.removeprefix("s3://")
        return f"/{re.escape(bucket_and_folder)}/{re.escape(database)}/{re.escape(table)}{LOG_COMMIT}"

    def direct_cfg(self, cfg):
        """``cfg`` reaching the same lake without the proxy: the lake as it is."""
        return cfg.model_copy(update={"sink": cfg.sink.model_copy(update={"storage_options": self.direct})})


def _table(conn, rows: int = 600) -> None:
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT, s VARCHAR(40))")
        cur.execute(f"INSERT INTO t SELECT seq, seq, CONCAT('row ', seq) FROM seq_1_to_{rows}")


def _changes(conn, salt: int) -> None:
    """Updates, deletes and inserts in several transactions: several stream batches."""
    with conn.cursor() as cur:
        for i in range(4):
            cur.execute("UPDATE t SET v = v + %s WHERE id %% 5 = %s", (salt, i))
            cur.execute("DELETE FROM t WHERE id %% 41 = %s", (i + salt,))
            cur.execute("INSERT INTO t SELECT 10000 * %s + 100 * %s + seq, seq, 'new' FROM seq_1_to_90", (salt, i))


def _config(name: str, make_config, lake: Lake, **options: str):
    # 6 chunks in groups of 2, in threads: several snapshot commits; batches of 150 rows: several stream commits
    return make_config(name, chunk_size=100, parallelism=2, sink=lake.sink(**options), stream={"max_batch_rows": 150},
                       source={"snapshot": {"chunk_size": 100, "max_rows_per_task": 200, "runner": "local"}})


def _fired(proxy: S3FaultProxy) -> int:
    return sum(r.fired for r in proxy.rules())


def _chunks_once(cfg, lake: Lake, table: str) -> None:
    """Every chunk of ``table``'s plan (saved once) is committed, and the table holds each of
    its files once (a commit repeated by delta-rs adds the same files again: held once)."""
    direct = lake.direct_cfg(cfg)
    indexes = [c.index for c in ControlStore.of(direct).load_plans()[table]]
    assert indexes == list(range(len(indexes))), indexes  # a plan saved twice would hold each chunk twice
    dt = DeltaTable(table_uri(cfg.sink.path, table), storage_options=lake.direct)
    assert {r.chunk_index for r in snapshot_commits(dt).records} == set(indexes)
    files = dt.get_add_actions(flatten=True).column("path").to_pylist()
    assert len(files) == len(set(files))


def _rows(*ids: int):
    return pa.table({"id": pa.array(ids, pa.int64())})


# --- what delta-rs and binlake make of each fault ---------------------------------------------


@pytest.mark.parametrize("kind", ["503", "timeout", "reset", "lost-rst"])
def test_store_faults_delta_rs_gives_up_on_are_transient(faulty, s3_proxy, kind):
    """The errors delta-rs raises once its own retries are spent (503), or at once for a
    conditional put of a log entry (never retried on a timeout or a broken connection: it is
    not idempotent), are transient faults of the store, named in one line; a refusal that
    does not pass (a missing bucket) is not."""
    uri = f"{faulty.path}/probe"
    write_deltalake(uri, _rows(0), storage_options=faulty.options)
    s3_proxy.arm(fault(kind, "PUT", LOG_COMMIT))
    with pytest.raises(OSError) as raised:
        write_deltalake(DeltaTable(uri, storage_options=faulty.options), _rows(1), mode="append")
    assert _fired(s3_proxy) >= 1
    assert is_transient(raised.value), raised.value
    cause = store_cause(raised.value)
    assert cause.startswith("object store: ") and "\n" not in cause, cause
    landed = DeltaTable(uri, storage_options=faulty.direct).version()
    assert landed == (1 if kind in ("timeout", "lost-rst") else 0)  # done by the store, or not at all
    with pytest.raises(OSError) as refused:
        write_deltalake(f"s3://no-such-{uuid.uuid4().hex[:12]}/t", _rows(1), storage_options=faulty.direct)
    assert not is_transient(refused.value), refused.value


# --- the snapshot ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
def test_snapshot_commits_under_store_faults(db, make_config, faulty, s3_proxy, kind):
    """Faults on the snapshot's Delta commits of the table (its creation passes): the snapshot
    completes, each chunk committed once, Delta equals MySQL; a re-run reads nothing."""
    name, conn = db
    _table(conn)
    cfg = _config(name, make_config, faulty)
    s3_proxy.arm(fault(kind, "PUT", faulty.log(name), skip=1))
    summary = SnapshotJob(cfg, retry=FAST).run()
    assert _fired(s3_proxy) >= 1, s3_proxy.rules()
    s3_proxy.clear()
    assert all(t.matches for t in summary.tables)
    _chunks_once(cfg, faulty, f"{name}.t")
    assert_equal(cfg, [f"{name}.t"])
    again = SnapshotJob(cfg, retry=FAST).run()
    assert sum(t.chunks_read for t in again.tables) == 0


MULTIPART = {"AWS_ALLOW_INVALID_CERTIFICATES": "true"}  # an option boto3 does not read: delta-rs's upload


@pytest.mark.parametrize("kind, method, path, query, options", [
    ("reset", "PUT", r"/part-snapshot-", "", {}),  # one PutObject per file (boto3)
    ("503", "PUT", r"/part-snapshot-", "", {}),
    ("reset", "PUT", r"/part-snapshot-", "partNumber=", MULTIPART),
    ("lost", "POST", r"/part-snapshot-", "uploadId=", MULTIPART),  # the upload's completion
    ("lost", "PUT", rf"/_binlake/snapshot_plan{LOG_COMMIT}", "", {}),
    ("reset", "PUT", rf"/_binlake/snapshot_chunks{LOG_COMMIT}", "", {}),
    ("503", "LIST", r"", "", {}),
], ids=["data-file-reset", "data-file-503", "multipart-part-reset", "multipart-complete-lost", "plan-lost",
        "chunk-mirror-reset", "list-503"])
def test_snapshot_files_and_control_tables_under_store_faults(db, make_config, faulty, s3_proxy, kind, method, path,
                                                               query, options):
    """Faults on the other requests of a snapshot: its data files (one PutObject, or delta-rs's
    multipart upload with an option boto3 does not read), its control tables (the plan, the
    chunk records' mirror) and the listings of the log."""
    name, conn = db
    _table(conn)
    cfg = _config(name, make_config, faulty, **options)
    s3_proxy.arm(fault(kind, method, path, query=query))
    summary = SnapshotJob(cfg, retry=FAST).run()
    assert _fired(s3_proxy) >= 1, s3_proxy.rules()
    s3_proxy.clear()
    assert all(t.matches for t in summary.tables)
    _chunks_once(cfg, faulty, f"{name}.t")
    assert_equal(cfg, [f"{name}.t"])


# --- the stream -------------------------------------------------------------------------------


def _streamed(db, make_config, lake: Lake, salt: int = 1):
    """A snapshotted table (no faults) and changes for the stream to read."""
    name, conn = db
    _table(conn)
    cfg = _config(name, make_config, lake)
    SnapshotJob(cfg, retry=FAST).run()
    _changes(conn, salt)
    return name, conn, cfg


def _assert_exact(cfg, lake: Lake, name: str) -> None:
    """Delta equals MySQL; the stream's commits count every binlog change once, their offsets increase."""
    direct = lake.direct_cfg(cfg)
    assert_equal(cfg, [f"{name}.t"])
    assert_changes_counted(direct, [f"{name}.t"])
    assert assert_stream_offsets_increase(direct, f"{name}.t") > 0


@pytest.mark.parametrize("kind", list(KINDS))
def test_stream_commits_under_store_faults(db, make_config, faulty, s3_proxy, kind):
    """Faults on the stream's table commits: every batch applied once (a commit whose answer was
    lost is found by its offset and not made again), the run ends as it would without them."""
    name, conn, cfg = _streamed(db, make_config, faulty)
    s3_proxy.arm(fault(kind, "PUT", faulty.log(name), skip=1))
    summary = StreamEngine(cfg, until_now=True, retry=FAST).run()
    assert _fired(s3_proxy) >= 1, s3_proxy.rules()
    s3_proxy.clear()
    assert summary.stop_reason.startswith("reached") and summary.batches >= 2, summary
    _assert_exact(cfg, faulty, name)


@pytest.mark.parametrize("kind, method, path", [
    ("lost", "PUT", rf"/_binlake/stream_checkpoint{LOG_COMMIT}"),
    ("reset", "PUT", rf"/_binlake/stream_checkpoint{LOG_COMMIT}"),
    ("503", "PUT", rf"/_binlake/stream_checkpoint{LOG_COMMIT}"),
    ("reset", "PUT", r"/part-stream-"),  # a copy-on-write's rewritten file
    ("503", "GET", r"/_delta_log/"),
    ("reset", "LIST", r""),
], ids=["checkpoint-lost", "checkpoint-reset", "checkpoint-503", "rewritten-file-reset", "log-read-503",
        "list-reset"])
def test_stream_checkpoints_files_and_reads_under_store_faults(db, make_config, faulty, s3_proxy, kind, method, path):
    """Faults on the stream's other requests: the checkpoint, a copy-on-write's files, reads of the log."""
    name, conn, cfg = _streamed(db, make_config, faulty)
    s3_proxy.arm(fault(kind, method, path, times=max(3, KINDS[kind].get("times", 1))))
    summary = StreamEngine(cfg, until_now=True, retry=FAST).run()
    assert _fired(s3_proxy) >= 1, s3_proxy.rules()
    s3_proxy.clear()
    assert summary.stop_reason.startswith("reached"), summary
    _assert_exact(cfg, faulty, name)


@pytest.mark.parametrize("op", ["snapshot", "stream"])
def test_store_failing_beyond_the_budget_stops_naming_it_then_a_rerun_resumes(db, make_config, faulty, s3_proxy,
                                                                               op):
    """503 on every commit of the table for longer than the retry budget: the run stops with a
    runtime failure (exit 1 from the CLI: TerminalError) naming the store and its answer; once
    the store answers again, a re-run resumes: nothing lost, nothing twice."""
    name, conn = db
    if op == "snapshot":
        _table(conn)
        cfg = _config(name, make_config, faulty)
    else:
        name, conn, cfg = _streamed(db, make_config, faulty)
    s3_proxy.arm(fault("503", "PUT", faulty.log(name), skip=1, times=100_000))
    started = time.monotonic()
    with pytest.raises(TerminalError) as failed:
        (SnapshotJob(cfg, retry=SHORT) if op == "snapshot" else StreamEngine(cfg, until_now=True, retry=SHORT)).run()
    assert time.monotonic() - started < 60
    message = str(failed.value)
    assert ("kept failing for over 3 s" in message or "object store has been failing for over 3 s" in message) \
        and "SlowDown" in message, message
    s3_proxy.clear()
    if op == "snapshot":
        SnapshotJob(cfg, retry=FAST).run()
        _chunks_once(cfg, faulty, f"{name}.t")
        assert_equal(cfg, [f"{name}.t"])
    else:
        StreamEngine(cfg, until_now=True, retry=FAST).run()
        _assert_exact(cfg, faulty, name)


def _error_lines(log: str) -> list[str]:
    """The ERROR (and worse) lines of a command's log: the store's faults are warnings."""
    return [line for line in log.splitlines() if re.search(r"\b(ERROR|CRITICAL)\b", line)]


def test_cli_snapshot_and_stream_exit_0_under_lost_answers(mariadb, db, make_config, faulty, s3_proxy, tmp_path):
    """The commands under lost answers and resets on every kind of commit (data tables, control
    tables): exit 0, no error line (the faults are warnings); Delta equals MySQL and nothing is applied twice."""
    name, conn = db
    _table(conn)
    cfg = _config(name, make_config, faulty)
    config = write_config_file(cfg, tmp_path / "binlake.yaml")
    s3_proxy.arm(fault("lost", "PUT", LOG_COMMIT, skip=2, times=3), fault("reset", "PUT", LOG_COMMIT, skip=12, times=2))
    r = run_cli("snapshot", "-c", config, password=mariadb.password)
    fired = _fired(s3_proxy)
    assert r.returncode == 0 and not _error_lines(r.stderr), r.stdout + r.stderr
    _changes(conn, 3)
    s3_proxy.arm(fault("lost", "PUT", LOG_COMMIT, skip=1, times=3), fault("reset", "PUT", LOG_COMMIT, skip=8, times=2))
    r = run_cli("stream", "-c", config, "--until", "now", password=mariadb.password)
    fired += _fired(s3_proxy)
    s3_proxy.clear()
    assert r.returncode == 0 and not _error_lines(r.stderr), r.stdout + r.stderr
    assert fired >= 6, fired
    _chunks_once(cfg, faulty, f"{name}.t")
    _assert_exact(cfg, faulty, name)


# --- online backfill --------------------------------------------------------------------------


def _damaged(db, make_config, lake: Lake):
    """A streamed table whose Delta rows were damaged by hand: each chunk of a backfill merges."""
    name, conn, cfg = _streamed(db, make_config, lake)
    StreamEngine(cfg, until_now=True, retry=FAST).run()
    dt = DeltaTable(table_uri(cfg.sink.path, f"{name}.t"), storage_options=lake.direct)
    dt.delete("id % 7 = 0")  # rows lost, and values changed, in every chunk
    dt.update(updates={"v": "-1"}, predicate="id % 5 = 0")
    return name, conn, cfg, request_backfill(cfg, f"{name}.t")


def _done(cfg, lake: Lake, request_id: str):
    return next(r for r in ControlStore.of(lake.direct_cfg(cfg)).backfills() if r.id == request_id)


@pytest.mark.parametrize("kind", list(KINDS))
def test_backfill_merges_under_store_faults(db, make_config, faulty, s3_proxy, kind):
    """Faults on an online backfill's merge commits: the request is done, Delta equals MySQL,
    the stream's commits still count every change once."""
    name, conn, cfg, req = _damaged(db, make_config, faulty)
    s3_proxy.arm(fault(kind, "PUT", faulty.log(name), skip=1))
    StreamEngine(cfg, until_now=True, retry=FAST).run()
    assert _fired(s3_proxy) >= 1, s3_proxy.rules()
    s3_proxy.clear()
    assert _done(cfg, faulty, req.id).state == BackfillState.DONE
    _assert_exact(cfg, faulty, name)


@pytest.mark.parametrize("kind", ["lost", "lost-rst", "reset"])
def test_backfill_merge_commit_of_several_chunks_lands_once_under_store_faults(db, make_config, faulty, s3_proxy,
                                                                                 kind):
    """A request read in groups (three 100-row chunks each) merges a run of chunks per commit; a
    fault on such a commit (its answer lost: the attempt's token in its metadata finds it landed;
    or never made) leaves every chunk in exactly one merge commit and Delta equal to MySQL."""
    name, conn, cfg, req = _damaged(db, make_config, faulty)
    snap = cfg.source.snapshot.model_copy(update={"backfill_spark_min_chunks": 2, "backfill_group_rows": 300})
    cfg = cfg.model_copy(update={"source": cfg.source.model_copy(update={"snapshot": snap})})
    s3_proxy.arm(fault(kind, "PUT", faulty.log(name), skip=1))
    StreamEngine(cfg, until_now=True, retry=FAST).run()
    assert _fired(s3_proxy) >= 1, s3_proxy.rules()
    s3_proxy.clear()
    done = _done(cfg, faulty, req.id)
    assert done.state == BackfillState.DONE and done.chunks_done == len(done.chunks), done
    dt = DeltaTable(table_uri(cfg.sink.path, f"{name}.t"), storage_options=faulty.direct)
    merges = [json.loads(c[BACKFILL_KEY]) for c in reversed(dt.history()) if c.get(BACKFILL_KEY)]
    merged = [c for m in merges if m["id"] == req.id for c in m["chunks"]]
    assert merged == list(range(len(done.chunks))), merges  # each chunk once, in order
    assert any(len(m["chunks"]) > 1 for m in merges), merges
    _assert_exact(cfg, faulty, name)


KEPT = ("_valid_from", "_valid_to", "_valid_to_seq", "_is_current", "_cdc_deleted")  # the modes' columns


def _kept(db, make_config, lake: Lake, mode: str):
    """A streamed ``mode`` table (with metadata columns) damaged by hand, and a backfill request:
    current versions (live rows) lost and changed, a live row made a tombstone, and a key MySQL
    lacks made live again; the table before the backfill, read without the proxy."""
    name, conn = db
    _table(conn)
    sink = {**lake.sink(), "table_modes": {rf"{name}\.t": mode}, "metadata_columns": ["_cdc_ts", "_cdc_position"]}
    cfg = make_config(name, chunk_size=100, parallelism=2, sink=sink, stream={"max_batch_rows": 150},
                      source={"snapshot": {"chunk_size": 100, "max_rows_per_task": 200, "runner": "local"}})
    SnapshotJob(cfg, retry=FAST).run()
    _changes(conn, 1)
    StreamEngine(cfg, until_now=True, retry=FAST).run()
    dt = DeltaTable(table_uri(cfg.sink.path, f"{name}.t"), storage_options=lake.direct)
    with conn.cursor() as cur:
        cur.execute("SELECT MIN(seq) FROM seq_1_to_600 WHERE seq NOT IN (SELECT id FROM t)")
        (lacked,) = cur.fetchone()  # a key deleted from MySQL: its row ended in Delta
    if mode == "history":
        dt.delete("id % 7 = 0 AND _is_current")
        dt.update(updates={"v": "-1"}, predicate="id % 5 = 0 AND _is_current")
        last = max(r["_cdc_seq"] for r in dt.to_pyarrow_table(filters=[("id", "=", lacked)]).to_pylist())
        dt.update(updates={"_is_current": "true", "_valid_to": "null", "_valid_to_seq": "null"},
                  predicate=f"id = {lacked} AND _cdc_seq = {last}")
    else:
        dt.delete("id % 7 = 0")
        dt.update(updates={"v": "-1"}, predicate="id % 5 = 0 AND NOT _cdc_deleted")
        dt.update(updates={"_cdc_deleted": "true"}, predicate="id % 11 = 0 AND NOT _cdc_deleted")
        dt.update(updates={"_cdc_deleted": "false"}, predicate=f"id = {lacked}")
    before = DeltaTable(table_uri(cfg.sink.path, f"{name}.t"), storage_options=lake.direct).to_pyarrow_table()
    return name, conn, cfg, request_backfill(cfg, f"{name}.t"), before


def _by_id(rows) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for r in sorted(rows.to_pylist(), key=lambda r: r["_cdc_seq"]):
        out.setdefault(r["id"], []).append(r)
    return out


def _values(row: dict | None) -> tuple | None:
    return None if row is None else (row["v"], row["s"])


def _assert_versions(mode: str, conn, before, after) -> None:
    """Each key's rows after the backfill are exactly those its merge makes of the rows before
    (docs/history.md, "Backfills"), once: ``history``, a key whose current version differs from
    MySQL's row (or is missing) gets one version 'r' closing it, one MySQL lacks has its current
    version closed, every other version is kept as it was; ``soft_delete``, one row per key, a
    differing or missing live row (or a tombstone of a key MySQL holds) written 'r', a live row
    of a key MySQL lacks made a tombstone, and every other row, tombstones too, kept as it was."""
    with conn.cursor() as cur:
        cur.execute("SELECT id, v, s FROM t")
        mysql = {i: (v, s) for i, v, s in cur.fetchall()}
    was, now = _by_id(before), _by_id(after)
    assert set(now) == set(was) | set(mysql)
    for key in sorted(set(now)):
        old, new, want = was.get(key, []), now[key], mysql.get(key)
        if mode == "history":
            current = [r for r in old if r["_is_current"]]
            assert len(current) <= 1, (key, old)
            differs = want is not None and (not current or _values(current[0]) != want)
            ends = bool(current) and (differs or want is None)
            assert len(new) == len(old) + differs, f"key {key}: {len(new)} versions, expected {len(old) + differs}"
            for o, n in zip(old, new):
                if ends and o is current[0]:
                    closed_at = new[-1]["_cdc_seq"] if differs else n["_valid_to_seq"]
                    assert not n["_is_current"] and n["_valid_to_seq"] == closed_at is not None, (key, o, n)
                    assert {k: v for k, v in n.items() if k not in KEPT} == \
                        {k: v for k, v in o.items() if k not in KEPT}, (key, o, n)
                else:
                    assert n == o, f"key {key}: a version changed"
            if differs:
                assert new[-1]["_cdc_op"] == "r" and new[-1]["_is_current"] and _values(new[-1]) == want, new[-1]
            assert [r["_is_current"] for r in new].count(True) == (want is not None), (key, new)
        else:
            assert len(new) == 1, f"key {key} held {len(new)} times"
            o, n = (old or [None])[0], new[0]
            live = o is not None and not o["_cdc_deleted"]
            if want is None:
                assert n["_cdc_deleted"], f"key {key}: MySQL lacks it, Delta holds it live"
                if not live:  # a tombstone left as it was: not brought back, not stamped again
                    assert n == o, (key, o, n)
                else:
                    assert n["_cdc_op"] == "d" and _values(n) == _values(o), (key, o, n)
            elif live and _values(o) == want:
                assert n == o, f"key {key}: an equal row was written again"
            else:
                assert not n["_cdc_deleted"] and n["_cdc_op"] == "r" and _values(n) == want, (key, o, n)


@pytest.mark.parametrize("mode", ["soft_delete", "history"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_backfill_merges_into_kept_tables_under_store_faults(db, make_config, faulty, s3_proxy, caplog, kind, mode):
    """Faults on an online backfill's merge commits into a ``soft_delete`` or ``history`` table:
    a merge whose commit landed while the client saw an error is found by its token and not
    made again; the request is done, Delta's live rows equal MySQL,
    and each key's versions are exactly those the merges make (no version twice, no tombstone
    brought back)."""
    caplog.set_level(logging.INFO, logger="pipelines.stream.online_backfill")
    name, conn, cfg, req, before = _kept(db, make_config, faulty, mode)
    s3_proxy.arm(fault(kind, "PUT", faulty.log(name), skip=1))
    StreamEngine(cfg, until_now=True, retry=FAST).run()
    assert _fired(s3_proxy) >= 1, s3_proxy.rules()
    s3_proxy.clear()
    assert _done(cfg, faulty, req.id).state == BackfillState.DONE
    assert_equal(cfg, [f"{name}.t"])
    after = DeltaTable(table_uri(cfg.sink.path, f"{name}.t"), storage_options=faulty.direct).to_pyarrow_table()
    _assert_versions(mode, conn, before, after)
    # Recognised where the store did the write and the client saw an error: after a timeout or a
    # reset, and after a lost answer where delta-rs, committing again, meets its own commit as a
    # conflict (a rewrite's: an append's it commits again, adding the same files).
    found = [r.getMessage() for r in caplog.records if "had been merged" in r.getMessage()]
    assert len(found) == 1 if kind in ("timeout", "lost-rst") else len(found) <= (kind == "lost"), found


def test_backfill_request_saves_under_store_faults(db, make_config, faulty, s3_proxy):
    """A lost answer and a reset on the writes of ``_binlake/backfill_requests`` (the request's
    progress): each state saved once, the request done."""
    name, conn, cfg, req = _damaged(db, make_config, faulty)
    path = rf"/_binlake/backfill_requests{LOG_COMMIT}"
    s3_proxy.arm(fault("lost", "PUT", path), fault("reset", "PUT", path, skip=1))
    StreamEngine(cfg, until_now=True, retry=FAST).run()
    assert _fired(s3_proxy) == 2, s3_proxy.rules()
    s3_proxy.clear()
    saved = ControlStore.of(faulty.direct_cfg(cfg))._read("backfill_requests")
    states = [(r["state"], r["chunks_done"]) for r in saved if r["id"] == req.id]
    assert len(states) == len(set(states)), states  # no state saved twice
    assert _done(cfg, faulty, req.id).state == BackfillState.DONE
    _assert_exact(cfg, faulty, name)


# --- the writer lease ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["lost", "lost-rst"])
def test_writer_lease_commit_whose_answer_was_lost_is_its_own(faulty, s3_proxy, kind):
    """The lease's commits allow no commit retry (exactly the version after the one read): an
    acquisition or a renewal whose answer was lost is its own commit, recognised as such,
    never taken for another holder's (which would refuse the run, or end it)."""
    lock = LeaseLock(faulty.path, "p", "binlake stream", ttl=30, storage_options=faulty.options,
                     renew_in_background=False)
    lease = rf"/_binlake/writer/p{LOG_COMMIT}"
    s3_proxy.arm(fault(kind, "PUT", lease))
    held = lock.acquire()
    s3_proxy.arm(fault(kind, "PUT", lease))
    lock.renew()
    assert _fired(s3_proxy) == 1
    s3_proxy.clear()
    look = LeaseLock(faulty.path, "p", "look", storage_options=faulty.direct)
    assert look.holder().token == held.token and look.holder().expires == lock.held.expires
    lock.release()
    assert look.holder() is None


# --- lake maintenance ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
def test_lake_maintenance_under_store_faults(db, make_config, faulty, s3_proxy, kind):
    """Faults on a compaction's Delta commit (``binlake maintain`` of a streamed table's small
    files): the commit, one removal of the inputs and one addition of the output, lands once or
    not at all; a failed run names the store, and a re-run finishes the work; nothing lost,
    nothing twice, each file held once."""
    name, conn, cfg = _streamed(db, make_config, faulty)
    m = cfg.sink.maintenance.model_copy(update={"auto": False})  # only the maintain calls below compact
    cfg = cfg.model_copy(update={"sink": cfg.sink.model_copy(update={"maintenance": m})})
    StreamEngine(cfg, until_now=True, retry=FAST).run()
    table = f"{name}.t"

    def live_files() -> list[str]:
        dt = DeltaTable(table_uri(cfg.sink.path, table), storage_options=faulty.direct)
        return dt.get_add_actions(flatten=True).column("path").to_pylist()

    before = live_files()
    assert len(before) >= 3, before
    s3_proxy.arm(fault(kind, "PUT", faulty.log(name)))
    try:
        maintain(cfg, table, "test")
    except Exception as e:  # noqa: BLE001 - a fault past what is retried: the re-run below finishes
        assert is_transient(e) or store_cause(e) is not None, e  # a fault of the store, named as one
    assert _fired(s3_proxy) >= 1, s3_proxy.rules()
    s3_proxy.clear()
    maintain(cfg, table, "test")
    after = live_files()
    assert len(after) == len(set(after)) and len(after) < len(before), (before, after)
    assert_equal(cfg, [table])
