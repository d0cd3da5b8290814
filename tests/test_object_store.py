"""The lake on object storage: everything binlake writes, on ``s3://<bucket>/lake`` of a
real S3 API (moto's server on loopback, tests/s3_endpoint.py), read back through
delta-rs with the same storage options.

- The whole cycle as a user runs it: ``binlake snapshot`` SIGKILLed mid-way and resumed
  (only unfinished chunks read again), ``binlake stream`` under a random workload
  SIGKILLed again and again, schema changes (a rewrite, a dropped column, a type change),
  restart: Delta equals MySQL row by row, each table's stream commits carry strictly
  increasing offsets, and every binlog change is counted once, per table and per key
  (tests/change_count.py).
- The snapshot on a Spark standalone cluster (a master and two workers on loopback):
  executors write the Parquet files to the bucket, the driver commits them.
- Commit safety: a store that ignores conditional writes (an endpoint dropping
  If-None-Match) is refused before anything is written; options that turn conditional
  writes off or ask for the DynamoDB lock are config errors; a missing bucket is one line.
- Credentials: the access key and secret never appear in the CLI's output (at DEBUG) nor
  in any object of the lake (commit metadata, control tables).
- Stream commits list the whole ``_delta_log`` (delta-rs's expired-log cleanup) only when
  they write a checkpoint.
"""

from __future__ import annotations

import itertools
import random
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from deltalake import CommitProperties, DeltaTable
from pyarrow.fs import FileSelector, FileType

from cdc_core.config import BinlakeConfig
from cdc_core.offset.stream_offset import OFFSET_KEY, StreamOffset, app_id
from pipelines.lake import tables
from pipelines.lake.apply import apply_changes
from pipelines.lake.control_store import ControlStore
from pipelines.lake.files import snapshot_commits
from pipelines.lake.storage import PROBE_DIR, filesystem
from pipelines.lake.tables import open_table, post_commit_hooks, table_uri
from pipelines.stream.online_backfill import BACKFILL_KEY
from tests.change_count import assert_changes_counted
from tests.helpers import assert_equal, snapshot, write_config_file
from tests.s3_endpoint import S3Server
from tests.spark_cluster import standalone_cluster
from tests.test_cli import run_cli
from tests.test_stream_crash import Stream, Writer, create_tables, run_stream, wait_for, workload_keys

SEED = 20241105
# Batches larger than the local crash tests' (each table commit is several requests in a row), and a
# writer at a fifth of their pace: on two loaded cores the catch-up after the kills stays a few minutes.
S3_STREAM = {"max_batch_rows": 2000, "max_batch_seconds": 1.0}
WRITER_PACE = 0.05


def _version(cfg: BinlakeConfig, name: str) -> int:
    t = open_table(table_uri(cfg.sink.path, name), cfg.sink.storage_options)
    return -1 if t is None else t.version()


def _lake_objects(cfg: BinlakeConfig) -> list[str]:
    """Paths (relative to the sink) of every object of the lake."""
    fs, prefix = filesystem(cfg.sink.path, cfg.sink.storage_options)
    return [i.path for i in fs.get_file_info(FileSelector(prefix, recursive=True)) if i.type == FileType.File]


def assert_stream_offsets_increase(cfg: BinlakeConfig, name: str) -> int:
    """Each stream commit of ``name`` carries an offset past the previous one's, and the table's
    transaction version is the last one's: nothing applied twice. Returns the number of them.
    An online backfill's merge carries the offset the table had (no change applied): not counted."""
    t = open_table(table_uri(cfg.sink.path, name), cfg.sink.storage_options)
    history = sorted(t.history(), key=lambda c: c["version"])
    offsets = [StreamOffset.from_json(c[OFFSET_KEY]) for c in history
               if c.get(OFFSET_KEY) and BACKFILL_KEY not in c]
    for a, b in itertools.pairwise(offsets):
        assert b.applied > a.applied, f"{name}: a commit applies through {b.applied}, not after {a.applied}"
    if offsets:
        assert t.transaction_version(app_id(cfg.pipeline.name)) == offsets[-1].applied.seq()
    return len(offsets)


def _kill_stream(config: str, logs, cfg: BinlakeConfig, password: str, rng: random.Random, *,
                 after_checkpoint: bool) -> None:
    """Start ``binlake stream`` and SIGKILL it right after its next checkpoint lands (between
    batches), or after a random 1-4 s (start-up, a MERGE, a commit)."""
    s = Stream(config, logs, password=password)
    if after_checkpoint:
        store = ControlStore.of(cfg)
        before = store.checkpoint()
        wait_for(lambda: store.checkpoint() != before or not s.alive(), 60, "a checkpoint", interval=0.2)
    else:
        time.sleep(rng.uniform(1.0, 4.0))
    assert s.alive(), s.describe()
    s.kill()


def test_snapshot_stream_kills_and_schema_changes_on_s3(mariadb, db, spark, make_config, s3_sink, tmp_path):
    name, conn = db
    create_tables(conn)
    names = [f"{name}.acct", f"{name}.orders", f"{name}.tags", f"{name}.events"]  # every kind of row key
    cfg = make_config(name, chunk_size=200, parallelism=1, stream=S3_STREAM, sink=s3_sink,
                      source=workload_keys(name, chunk_size=200, max_rows_per_task=400))
    config = write_config_file(cfg, tmp_path / "binlake.yaml")
    logs = tmp_path / "logs"

    # 1. The snapshot, SIGKILLed once its first chunk group is committed (the commit that creates
    # the table, version 0), then resumed. (On an object store later groups wait up to
    # OBJECT_STORE_COMMIT_INTERVAL for a shared commit: a later version may come only once every
    # chunk is read.)
    snap = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "snapshot", "-c", config],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: _version(cfg, names[0]) >= 0 or snap.poll() is not None, 180, "snapshot commits")
        assert snap.poll() is None, "the snapshot finished before it could be killed; make the tables bigger"
    finally:
        snap.kill()
        snap.wait()
    summary = snapshot(cfg, spark)
    assert 0 < sum(t.chunks_read for t in summary.tables) < sum(t.chunks for t in summary.tables)  # only unfinished
    assert_equal(cfg, names)

    # 2. The stream under a random workload, SIGKILLed at random moments and restarted.
    rng = random.Random(SEED)
    writer = Writer(mariadb, name, SEED + 1, pace=WRITER_PACE)
    writer.start()
    try:
        for i in range(4):
            _kill_stream(config, logs, cfg, mariadb.password, rng, after_checkpoint=bool(i % 2))
        writer.request_big()
        time.sleep(1.0)
        writer.pause()

        # 3. Schema changes while the stream is stopped, then more writes and a kill mid-way.
        with conn.cursor() as cur:  # each a rewrite of the Delta table (the writer's statements still fit)
            cur.execute("ALTER TABLE acct MODIFY balance DECIMAL(16,3)")  # a wider type
            cur.execute("ALTER TABLE orders RENAME COLUMN note TO memo")  # memo filled from note, note kept
            cur.execute("ALTER TABLE tags ADD COLUMN extra INT NOT NULL DEFAULT 7")  # existing rows take 7
        writer.resume()
        _kill_stream(config, logs, cfg, mariadb.password, rng, after_checkpoint=True)
        writer.stop()
    finally:
        writer.stop_event.set()
        writer.running.set()
    final = run_stream(config, logs, "--until", "now", password=mariadb.password, timeout=900)
    assert final.proc.returncode == 0, final.describe()
    assert_equal(cfg, names)
    commits = {n: assert_stream_offsets_increase(cfg, n) for n in names}
    assert all(commits.values()), commits
    assert_changes_counted(cfg, names)  # every kill: no change lost or applied twice, per table and per key
    status = run_cli("status", "-c", config, "--json", password=mariadb.password)
    assert status.returncode == 0, status.stderr
    assert '"streaming' in status.stdout
    print(f"workload: {dict(writer.ops)}; stream commits: {commits}")


def test_snapshot_on_a_two_worker_cluster_writes_to_s3(db, make_config, s3_sink, tmp_path):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v DOUBLE, s VARCHAR(20))")
        cur.execute("INSERT INTO t SELECT seq, seq / 7, CONCAT('row ', seq) FROM seq_1_to_6000")
    cfg = make_config(name, chunk_size=500, parallelism=2, sink=s3_sink)
    with standalone_cluster(tmp_path, workers=2) as cluster:
        path = write_config_file(cfg, tmp_path / "binlake.yaml", spark={"master": cluster.master})
        out = subprocess.run([sys.executable, "-m", "pipelines.cli", "snapshot", "-c", path], env=cluster.driver_env(),
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert "match" in out.stdout
    # Both workers ran an executor of the application (<work dir>/<app id>/<executor id>).
    assert all(list(w.glob("app-*/*")) for w in cluster.work_dirs), [list(w.glob("*/*"))
                                                                               for w in cluster.work_dirs]
    assert_equal(cfg, [f"{name}.t"])
    files = _lake_objects(cfg)
    assert any(f.endswith(".parquet") and f"/{name}/t/part-snapshot-" in f"/{f}" for f in files), files
    assert not [f for f in files if PROBE_DIR in f], "the commit probe was not removed"


def test_snapshot_groups_finishing_within_the_commit_interval_share_a_commit(db, make_config, s3_sink, monkeypatch):
    """On an object store, groups that finish within OBJECT_STORE_COMMIT_INTERVAL of the last
    commit wait for the next one (a commit is about 9 requests there): the first group commits
    at once (with any finished beside it), the others together once the last is done; every
    chunk is recorded once, at the version holding its rows, and Delta equals MySQL."""
    from pipelines.snapshot import driver as snapshot_driver

    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute("INSERT INTO t SELECT seq, CONCAT('v', seq) FROM seq_1_to_4000")
    cfg = make_config(name, chunk_size=250, parallelism=2, sink=s3_sink,
                      source={"snapshot": {"chunk_size": 250, "max_rows_per_task": 500, "runner": "local"}})
    monkeypatch.setattr(snapshot_driver, "OBJECT_STORE_COMMIT_INTERVAL", 600.0)
    real, files_per_commit = snapshot_driver.commit_files, []

    def counted(table, files, schema, metadata, retry=None):
        files_per_commit.append(len(files))
        return real(table, files, schema, metadata, retry)

    monkeypatch.setattr(snapshot_driver, "commit_files", counted)
    summary = snapshot(cfg, None)
    groups = (summary.tables[0].chunks + 1) // 2
    # The first commit takes the groups done when it starts (one, or two finishing together on a
    # loaded machine); every later group waits for the interval, which only the end cuts short.
    first, *rest = [n for n in files_per_commit if n]
    assert len(rest) == 1 and first + rest[0] == groups, files_per_commit
    uri = table_uri(cfg.sink.path, f"{name}.t")
    records = snapshot_commits(DeltaTable(uri, storage_options=cfg.sink.storage_options)).records
    assert sorted(r.chunk_index for r in records) == list(range(summary.tables[0].chunks))
    assert_equal(cfg, [f"{name}.t"])


def test_store_ignoring_conditional_writes_is_refused(mariadb, db, spark, make_config, tmp_path):
    """An S3 endpoint that drops If-None-Match (as a store without conditional writes): two
    writers' commits of one version could overwrite each other, so validate and snapshot
    refuse before writing anything."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO t VALUES (1), (2)")
    gateway = S3Server.start(drop_conditions=True)
    try:
        bucket = gateway.create_bucket(f"unsafe-{name.replace('_', '-')}")
        cfg = make_config(name, sink={"path": f"s3://{bucket}/lake", "storage_options": gateway.storage_options()})
        r = run_cli("validate", "-c", write_config_file(cfg, tmp_path / "binlake.yaml"), password=mariadb.password)
        assert r.returncode == 2, r.stdout + r.stderr
        (line,) = [x for x in r.stderr.splitlines() if x.strip()]
        assert "conditional writes" in line and cfg.sink.path in line, line
        from pipelines.lake.storage import UnsafeSink

        with pytest.raises(UnsafeSink, match="conditional writes"):
            snapshot(cfg, spark)
        assert _lake_objects(cfg) == []  # nothing written, the probe removed
    finally:
        gateway.stop()


@pytest.mark.parametrize("option, value, says", [
    ("conditional_put", "disabled", "conditional writes"),
    ("AWS_S3_LOCKING_PROVIDER", "dynamodb", "DynamoDB"),
])
def test_unsafe_storage_options_are_config_errors(mariadb, db, make_config, s3_sink, tmp_path, option, value, says):
    name, _ = db  # a config error: reported before the source is looked at
    cfg = make_config(name, sink=s3_sink)
    path = write_config_file(cfg, tmp_path / "binlake.yaml")
    raw = yaml.safe_load(Path(path).read_text())
    raw["sink"]["storage_options"][option] = value
    Path(path).write_text(yaml.safe_dump(raw))
    r = run_cli("validate", "-c", path, password=mariadb.password)
    assert r.returncode == 2, r.stdout + r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.strip()]
    assert option in line and says in line, line


def test_missing_bucket_is_one_line_exit_2(mariadb, db, make_config, s3_server, tmp_path):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    cfg = make_config(name, sink={"path": "s3://no-such-bucket/lake", "storage_options": s3_server.storage_options()})
    r = run_cli("snapshot", "-c", write_config_file(cfg, tmp_path / "binlake.yaml"), password=mariadb.password)
    assert r.returncode == 2, r.stdout + r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.strip()]
    assert "NoSuchBucket" in line and "s3://no-such-bucket/lake" in line, line
    assert "Traceback" not in r.stdout + r.stderr


def test_credentials_never_shown(mariadb, db, make_config, s3_server, s3_sink, tmp_path):
    """With DEBUG logging, the CLI's output of a snapshot, a stream and status, and every object
    of the lake (Delta logs with their commit metadata, control tables, data files) hold neither
    the access key id nor the secret."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute("INSERT INTO t SELECT seq, CONCAT('v', seq) FROM seq_1_to_500")
    cfg = make_config(name, sink=s3_sink)
    config = write_config_file(cfg, tmp_path / "binlake.yaml")
    assert s3_server.secret_key not in (tmp_path / "binlake.yaml").read_text()  # ${VAR} in the file
    outputs = [run_cli("-v", "snapshot", "-c", config, password=mariadb.password)]
    with conn.cursor() as cur:
        cur.execute("UPDATE t SET v = 'changed' WHERE id < 100")
    outputs.append(run_cli("-v", "stream", "-c", config, "--until", "now", password=mariadb.password))
    outputs.append(run_cli("-v", "status", "-c", config, password=mariadb.password))
    for r in outputs:
        assert r.returncode == 0, r.stderr[-2000:]
        for secret in (s3_server.secret_key, s3_server.access_key):
            assert secret not in r.stdout + r.stderr, "a credential leaked into the output"
    assert_equal(cfg, [f"{name}.t"])
    fs, _ = filesystem(cfg.sink.path, cfg.sink.storage_options)
    objects = _lake_objects(cfg)
    assert any("/_binlake/" in f"/{o}" for o in objects) and any(o.endswith(".json") for o in objects)
    for path in objects:
        with fs.open_input_stream(path) as f:
            data = f.read()
        for secret in (s3_server.secret_key, s3_server.access_key):
            assert secret.encode() not in data, f"a credential is stored in {path}"


def test_stream_commits_clean_up_the_log_only_at_checkpoints(tmp_path, monkeypatch):
    """The expired-log cleanup lists the whole _delta_log: stream commits run it only when they
    write a checkpoint (every delta.checkpointInterval commits), at most once per CLEANUP_VERSIONS
    versions (here 8: at the checkpoint of version 9, not at that of 4), and it still removes what
    expired."""
    monkeypatch.setattr(tables, "CLEANUP_VERSIONS", 8)
    schema = pa.schema([("id", pa.int64()), ("_cdc_op", pa.string())])
    dt = DeltaTable.create(str(tmp_path / "t"), schema=schema, configuration={
        "delta.checkpointInterval": "5", "delta.logRetentionDuration": "interval 0 seconds"})
    log = tmp_path / "t" / "_delta_log"
    empty = schema.empty_table()
    kept = []
    for i in range(12):
        assert post_commit_hooks(dt).cleanup_expired_logs == (dt.version() + 1 == 9)
        apply_changes(dt, ("id",), pa.table({"id": pa.array([i], pa.int64()), "_cdc_op": ["c"]}), empty, empty,
                      CommitProperties())
        kept.append(sorted(int(f.name.split(".")[0]) for f in log.glob("*.json")))
    assert kept[3] == [0, 1, 2, 3, 4] and kept[8] == [9]  # cleaned up at the checkpoint of version 9 only
    assert kept[7] == list(range(9)) and kept[11] == [9, 10, 11, 12]  # and not in between
    assert dt.to_pyarrow_table().num_rows == 12
