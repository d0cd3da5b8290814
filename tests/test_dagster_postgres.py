"""The Dagster instance a team runs (dagster.production.yaml, workspace.production.yaml) on a
real PostgreSQL (devtools/local_postgres.py): the code location server, ``dagster-webserver``
and ``dagster-daemon`` as separate processes, against a real MariaDB.

Snapshot (a Dagster backfill of every chunk partition) → hand-off → continuous stream; then,
while the stream run is active, the daemon and the webserver are stopped and started again:
the stream run goes on (the same run; the offsets on the table's asset, read through the new
webserver's GraphQL, keep moving), the sensors tick again, and no second stream run writes (one
launched by hand waits in the queue behind the tag limit; ``binlake stream`` is refused by the
writer lock). A Dagster backfill of a chunk partition while the stream runs materializes it
again from its chunk record without writing to Delta. Restarting the code location server (a
deploy) stops the stream run cleanly and the hand-off sensor starts the next one; a Terminate
from the UI is not relaunched. Delta equals MySQL row by row."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter
from dagster._core.scheduler.instigation import InstigatorType, TickStatus
from deltalake import DeltaTable

from devtools.local_mariadb import free_ports
from devtools.local_postgres import LocalPostgres
from devtools.ui import (
    component_state_path,
    graphql,
    launch_job,
    launch_snapshot,
    start_dagster,
    stop_dagster,
    terminate_run,
    wait_for_webserver,
)
from orchestration.stream import STREAM_JOB
from pipelines.lake.tables import table_uri
from pipelines.source_catalog import discover
from resources.binlake import STOPPED_TAG
from tests.helpers import assert_equal, diff_tables, write_config_file

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
LATEST = """query($key: AssetKeyInput!) { assetOrError(assetKey: $key) { ... on Asset {
  assetMaterializations(limit: 5) { description metadataEntries { label ... on IntMetadataEntry { intRepr } } } } } }"""


def wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(1)
    return value


def offset_on_asset(port: int, table: str) -> int | None:
    """The asset page's latest stream offset (``binlake/cdc_seq``), through GraphQL."""
    asset = graphql(port, LATEST, {"key": {"path": table.split(".")}})["assetOrError"]
    for m in asset.get("assetMaterializations", []):
        seq = [e["intRepr"] for e in m["metadataEntries"] if e["label"] == "binlake/cdc_seq"]
        if seq:
            return int(seq[0])
    return None


def wait_for_code_server(port: int, proc, timeout: float = 300) -> None:
    """Until the code location server answers (the webserver and the daemon load it when they start)."""
    from dagster._grpc.client import DagsterGrpcClient

    def serving() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"the code location server exited with code {proc.returncode}")
        try:
            return DagsterGrpcClient(port=port, host="127.0.0.1").health_check_query() == "SERVING"
        except Exception:  # noqa: BLE001 - not listening yet
            return False

    wait(serving, timeout, "the code location server")


def snapshot_commits(uri: str) -> int:
    return sum(1 for c in DeltaTable(uri).history() if "binlake.snapshot.chunks" in c)


@pytest.mark.slow
def test_production_instance_survives_restarts_of_daemon_and_webserver(db, make_config, tmp_path, monkeypatch):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO a SELECT seq, seq FROM seq_1_to_600")
    table = f"{name}.a"
    cfg = make_config(name, chunk_size=200, stream={"max_batch_seconds": 0.5, "heartbeat_seconds": 2},
                      dagster={"stream": {"mode": "continuous"}, "idle_offset_seconds": 5})
    config = Path(write_config_file(cfg, tmp_path / "binlake.yaml"))
    state = component_state_path(cfg.pipeline.name)
    discover(cfg).write(state)  # deployed code servers do not discover tables at load
    pg = LocalPostgres()  # started in the try below, stopped in its finally
    for k, v in pg.env().items():
        monkeypatch.setenv(k, v)  # for this process's instance and every service's
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "dagster.production.yaml").read_text())
    workspace = yaml.safe_load((ROOT / "workspace.production.yaml").read_text())
    code_port, web_port = free_ports(2)
    workspace["load_from"][0]["grpc_server"]["port"] = code_port
    (tmp_path / "workspace.yaml").write_text(yaml.safe_dump(workspace))
    ws = str(tmp_path / "workspace.yaml")
    logs = tmp_path / "logs"
    logs.mkdir()

    def webserver():
        return start_dagster(["dagster-webserver", "-w", ws, "-h", "127.0.0.1", "-p", str(web_port)], config, home,
                             logs / "webserver.log")

    def code_server():
        return start_dagster(["dagster", "code-server", "start", "-h", "127.0.0.1", "-p", str(code_port), "-f",
                              "orchestration/definitions.py", "-a", "defs", "-d", ".", "--location-name", "binlake"],
                             config, home, logs / "code-server.log")

    def daemon():
        return start_dagster(["dagster-daemon", "run", "-w", ws], config, home, logs / "daemon.log")

    uri = table_uri(cfg.sink.path, table)
    started = []
    t0 = time.monotonic()
    try:
        pg.start()
        instance = DagsterInstance.from_config(str(home))  # the schema created once, before the services start
        started.append(code_server())
        wait_for_code_server(code_port, started[0])
        started += [webserver(), daemon()]
        wait_for_webserver(web_port, started[1], timeout=300)
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        wait(lambda: instance.get_dynamic_partitions(f"binlake_chunks__{name}__a"), 300, "chunk partitions")
        launch_snapshot(web_port, [table])
        stream = wait(lambda: instance.get_runs(RunsFilter(job_name=STREAM_JOB, statuses=[DagsterRunStatus.STARTED])),
                      600, "the hand-off sensor to start the stream")[0]
        print(f"{time.monotonic() - t0:.0f} s: stream run {stream.run_id[:8]} started")
        with conn.cursor() as cur:
            cur.execute("INSERT INTO a SELECT seq, seq FROM seq_1001_to_1100")
        before = wait(lambda: offset_on_asset(web_port, table), 300, "the stream's first offset on the asset")

        restarted = time.time()
        for i, start in ((2, daemon), (1, webserver)):  # stopped, then started again, while the stream runs
            stop_dagster(started[i])
            started[i] = start()
        wait_for_webserver(web_port, started[1], timeout=300)
        print(f"{time.monotonic() - t0:.0f} s: daemon and webserver restarted")
        assert instance.get_run_by_id(stream.run_id).status == DagsterRunStatus.STARTED
        with conn.cursor() as cur:
            cur.execute("INSERT INTO a SELECT seq, seq FROM seq_2001_to_2100")
            cur.execute("UPDATE a SET v = -v WHERE id <= 50")
        wait(lambda: (offset_on_asset(web_port, table) or 0) > before, 300, "the offset to move after the restarts")

        def handoff_ticks_since_restart():
            for s in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
                if s.instigator_name == "stream_handoff_sensor":
                    # a tick still being evaluated (STARTED) has no skip reason yet
                    return [t for t in instance.get_ticks(s.instigator_origin_id, s.selector_id, after=restarted)
                            if t.status != TickStatus.STARTED]
            return []

        ticks = wait(handoff_ticks_since_restart, 120, "the hand-off sensor to tick again")
        assert any("one stream at a time" in (t.skip_reason or "") for t in ticks), [
            (t.status, t.skip_reason, t.error) for t in ticks]

        # No second stream: one launched by hand waits in the queue; the CLI is refused by the writer lock.
        queued = launch_job(web_port, STREAM_JOB)
        time.sleep(8)  # several passes of the daemon's run queue
        assert instance.get_run_by_id(queued).status == DagsterRunStatus.QUEUED
        terminate_run(web_port, queued)
        wait(lambda: instance.get_run_by_id(queued).status == DagsterRunStatus.CANCELED, 60, "the queued run cancelled")
        cli = subprocess.run([str(BIN / "binlake"), "stream", "-c", str(config), "--until", "now"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
        assert cli.returncode == 2 and f"dagster run {stream.run_id}" in cli.stdout + cli.stderr, cli.stderr

        # A chunk partition materialized again while the stream runs: from its record, nothing written.
        commits = snapshot_commits(uri)
        backfill = launch_snapshot(web_port, [table], partitions=["chunk-0001"])
        partition_run = wait(lambda: [r for r in instance.get_runs(RunsFilter(tags={"dagster/backfill": backfill}))
                                      if r.is_finished], 300, "the partition's run")[0]
        assert partition_run.status == DagsterRunStatus.SUCCESS
        again = [r for r in instance.fetch_materializations(AssetKey([name, "a"]), limit=50).records
                 if r.run_id == partition_run.run_id]
        assert [(r.partition_key, r.asset_materialization.description) for r in again] == [
            ("chunk-0001", "snapshot chunk already in Delta")]
        assert snapshot_commits(uri) == commits

        wait(lambda: all(d.equal for d in diff_tables(cfg, [table])), 120, "Delta to catch up with MySQL")
        assert [r.run_id for r in instance.get_runs(RunsFilter(job_name=STREAM_JOB, statuses=[
            DagsterRunStatus.STARTED]))] == [stream.run_id]

        # A deploy: the code location server restarted. Its stream run stops cleanly, not as a
        # Terminate from the UI, so the hand-off sensor starts the next one on the new server.
        stop_dagster(started[0])
        ended = instance.get_run_by_id(stream.run_id)
        assert ended.status == DagsterRunStatus.SUCCESS and STOPPED_TAG not in ended.tags
        started[0] = code_server()
        wait_for_code_server(code_port, started[0])
        after = wait(lambda: [r for r in instance.get_runs(RunsFilter(job_name=STREAM_JOB, statuses=[
            DagsterRunStatus.STARTED])) if r.run_id != stream.run_id], 300, "the next stream run")[0]
        print(f"{time.monotonic() - t0:.0f} s: code server restarted, stream run {after.run_id[:8]} started")
        with conn.cursor() as cur:
            cur.execute("DELETE FROM a WHERE id > 2050")
        wait(lambda: all(d.equal for d in diff_tables(cfg, [table])), 120, "Delta to catch up with MySQL")
        terminate_run(web_port, after.run_id)
        ended = wait(lambda: [r for r in [instance.get_run_by_id(after.run_id)] if r.is_finished], 120,
                     "the stream run to stop")[0]
        assert ended.tags.get(STOPPED_TAG) == "terminate"  # from the UI: not relaunched
        print(f"{time.monotonic() - t0:.0f} s: done")
    except BaseException:
        for log in sorted(logs.iterdir()):
            print(f"--- {log.name}\n{log.read_text()[-15000:]}")
        raise
    finally:
        stop_dagster(*started)
        pg.stop()
        state.unlink(missing_ok=True)
    assert_equal(cfg, [table])
