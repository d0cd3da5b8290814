"""``make ui``: a throwaway MariaDB with the demo's ``shop`` schema and live traffic, and
``dagster dev`` (webserver and daemon) on binlake's code location, wired together:

1. MariaDB in ./.ui/mariadb (removed on exit) with the shop schema and a ``binlake`` user;
2. the config ./.ui/binlake.yaml (lake in ./.ui/lake, continuous stream, schema changes
   through the Dagster sensor) and its table catalog, discovered once;
3. ``dagster dev`` with DAGSTER_HOME=./.ui/dagster_home (the shipped dagster.yaml) on
   http://127.0.0.1:3000 (``--port``), a slow trickle of shop traffic meanwhile.

The functions that start ``dagster dev`` and talk GraphQL to it are shared with the
end-to-end test (tests/test_dagster_e2e.py) and the screenshot script (devtools/screenshots.py).
Run with ``.venv/bin/python -m devtools.ui`` from the repository root.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UI_DIR = ROOT / ".ui"
BIN = Path(sys.executable).parent


def component_state_path(pipeline: str) -> Path:
    """Where the BinlakeComponent of ``pipeline`` keeps its table catalog (local filesystem state)."""
    from dagster.components.utils.project_paths import get_local_state_path

    return get_local_state_path(f"BinlakeComponent[{pipeline}]", ROOT)


def dagster_home(path: Path) -> Path:
    """A DAGSTER_HOME at ``path`` holding the shipped dagster.yaml."""
    path.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "dagster.yaml", path / "dagster.yaml")
    return path


def start_dagster_dev(config: Path, home: Path, port: int, log: Path) -> subprocess.Popen:
    """``dagster dev`` (webserver + daemon) on ``workspace.yaml`` for the binlake config ``config``."""
    env = dict(os.environ, BINLAKE_CONFIG=str(config), DAGSTER_HOME=str(home), VIRTUAL_ENV=str(BIN.parent))
    out = log.open("ab")
    return subprocess.Popen([str(BIN / "dagster"), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
                            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop_dagster_dev(proc: subprocess.Popen, timeout: float = 30) -> None:
    """Stop ``dagster dev`` and everything it started (its own process group)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def graphql(port: int, query: str, variables: dict | None = None, timeout: float = 30) -> dict:
    """One GraphQL request to the webserver; returns ``data`` (raises on GraphQL errors)."""
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        answer = json.loads(resp.read())
    if answer.get("errors"):
        raise RuntimeError(f"GraphQL errors: {answer['errors']}")
    return answer["data"]


def wait_for_webserver(port: int, proc: subprocess.Popen, timeout: float = 180) -> None:
    """Until the webserver answers GraphQL and the code location has loaded."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"dagster dev exited with code {proc.returncode}")
        try:
            data = graphql(port, "{ workspaceOrError { ... on Workspace { locationEntries { name "
                                 "locationOrLoadError { __typename ... on PythonError { message } } } } } }")
            entries = data["workspaceOrError"]["locationEntries"]
            kinds = [e["locationOrLoadError"] and e["locationOrLoadError"]["__typename"] for e in entries]
            if "PythonError" in kinds:
                raise RuntimeError(f"the code location failed to load: {entries}")
            if kinds and all(k == "RepositoryLocation" for k in kinds):
                return
        except OSError:
            pass
        time.sleep(1)
    raise TimeoutError(f"dagster dev did not answer on port {port} within {timeout:.0f} s")


LAUNCH_BACKFILL = """mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message }
  ... on InvalidSubsetError { message } ... on UnauthorizedError { message } } }"""


def launch_snapshot(port: int, tables: list[str]) -> str:
    """Materialise every chunk partition of ``tables`` (the UI's 'Materialize all'); returns the backfill id."""
    params = {"assetSelection": [{"path": t.split(".", 1)} for t in tables], "allPartitions": True,
              "title": "binlake snapshot"}
    answer = graphql(port, LAUNCH_BACKFILL, {"params": params})["launchPartitionBackfill"]
    if answer["__typename"] != "LaunchBackfillSuccess":
        raise RuntimeError(f"snapshot backfill not launched: {answer}")
    return answer["backfillId"]


LAUNCH_RUN = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
  ... on RunConfigValidationInvalid { errors { message } } ... on InvalidSubsetError { message } } }"""


def launch_job(port: int, job: str, run_config: dict | None = None) -> str:
    """The Launchpad's Launch Run for ``job`` of the binlake location; returns the run id."""
    params = {"selector": {"repositoryLocationName": "binlake", "repositoryName": "__repository__", "jobName": job},
              "runConfigData": run_config or {}}
    answer = graphql(port, LAUNCH_RUN, {"params": params})["launchRun"]
    if answer["__typename"] != "LaunchRunSuccess":
        raise RuntimeError(f"{job} not launched: {answer}")
    return answer["run"]["runId"]


def terminate_run(port: int, run_id: str) -> None:
    """The UI's Terminate button."""
    answer = graphql(port, """mutation($id: String!) { terminateRun(runId: $id) { __typename
        ... on PythonError { message } ... on TerminateRunFailure { message } } }""", {"id": run_id})["terminateRun"]
    if answer["__typename"] != "TerminateRunSuccess":
        raise RuntimeError(f"terminate failed: {answer}")


def ui_config(server, lake: Path, path: Path, password_var: str) -> Path:
    """The config ``make ui`` runs: the demo's source, a continuous stream, schema changes via Dagster."""
    import yaml

    cfg = {
        "pipeline": {"name": "shop_ui", "parallelism": 2, "schema_change_behavior": "lenient"},
        "source": {"host": server.host, "port": server.port, "user": "binlake", "password": f"${{{password_var}}}",
                   "server_id": 5400, "tables": [r"shop\..*"], "snapshot": {"chunk_size": 500}},
        "sink": {"path": str(lake)},
        "stream": {"max_batch_seconds": 1.0, "heartbeat_seconds": 5},
        "dagster": {"stream": {"mode": "continuous"}, "idle_offset_seconds": 30, "max_lag_seconds": 60,
                    "freshness": {"fail_after_seconds": 600, "warn_after_seconds": 120}},
    }
    path.write_text("# written by `make ui` (devtools/ui.py)\n" + yaml.safe_dump(cfg, sort_keys=False))
    return path


class UiEnvironment:
    """MariaDB with the shop schema, the config and catalog, and ``dagster dev``: started by
    ``start()``, removed by ``stop()`` (the lake and Dagster's history stay in ./.ui)."""

    def __init__(self, port: int = 3000, base: Path = UI_DIR):
        self.port, self.base = port, base
        self.server = self.dagster = self.traffic = None
        self.config = base / "binlake.yaml"

    def start(self, traffic_pause: float = 0.25) -> UiEnvironment:
        import random
        import secrets

        from cdc_core.config import load_config
        from devtools.demo import PASSWORD_VAR, Traffic, load_shop
        from devtools.local_mariadb import LocalMariaDB
        from pipelines.source_catalog import discover

        for old in ("mariadb", "lake", "dagster_home"):
            shutil.rmtree(self.base / old, ignore_errors=True)
        (self.base / "mariadb").mkdir(parents=True)
        self.server = LocalMariaDB(server_id=1, base_dir=(self.base / "mariadb").resolve(),
                                   extra_args=("--innodb-buffer-pool-size=128M",)).start()
        os.environ.setdefault(PASSWORD_VAR, secrets.token_urlsafe(16))
        with self.server.connect() as conn:
            loaded = load_shop(conn, random.Random(42))
            with conn.cursor() as cur:
                cur.execute("CREATE USER 'binlake'@'%%' IDENTIFIED BY %s", (os.environ[PASSWORD_VAR],))
                cur.execute("GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'binlake'@'%'")
        print(f"MariaDB on {self.server.host}:{self.server.port}: "
              + ", ".join(f"{t} {n:,} rows" for t, n in loaded.items()), flush=True)
        ui_config(self.server, (self.base / "lake").resolve(), self.config, PASSWORD_VAR)
        cfg = load_config(self.config)
        discover(cfg).write(component_state_path(cfg.pipeline.name))
        self.traffic = Traffic(self.server, random.Random(7), pause=traffic_pause).start()
        self.dagster = start_dagster_dev(self.config, dagster_home(self.base / "dagster_home"), self.port,
                                         self.base / "dagster.log")
        wait_for_webserver(self.port, self.dagster)
        return self

    def stop(self) -> None:
        if self.traffic is not None:
            self.traffic.stop()
        if self.dagster is not None:
            stop_dagster_dev(self.dagster)
        if self.server is not None:
            self.server.stop()
            shutil.rmtree(self.base / "mariadb", ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=3000)
    args = parser.parse_args()
    env = UiEnvironment(args.port)
    try:
        print("starting MariaDB, loading the shop schema and starting dagster dev (its log: .ui/dagster.log) ...",
              flush=True)
        env.start()
        print(f"""
Dagster UI: http://127.0.0.1:{args.port}   (Ctrl-C stops everything)

  1. Assets → shop: one asset per table; each asset's partitions are its snapshot chunks
     (snapshot_partitions_sensor adds them within ~30 s).
  2. Select the three assets → Materialize → all partitions: one run per table on Spark.
  3. When every chunk is done, stream_handoff_sensor launches binlake_stream (continuous);
     a table's asset page then shows its offset (binlog file/pos, _cdc_seq, Delta version,
     rows by op, lag) after every micro-batch, with plots.
  4. Change the schema (mariadb -h 127.0.0.1 -P {env.server.port} -u root -p shop; the root password is
     ROOT_PASSWORD in devtools/local_mariadb.py), e.g. ALTER TABLE shop.customers ADD COLUMN tier INT:
     schema_change_sensor launches apply_schema_changes, and the column appears on the asset.
  5. Jobs → binlake_reconcile → Launch (nightly on its schedule): each table's checksum_parity check
     compares MySQL and Delta chunk by chunk; where it fails, launch binlake_repair from its
     Launchpad to backfill exactly the differing chunks through the running stream.
  6. Jobs → binlake_backfill → Launchpad: list tables, each with an optional key range
     (tables: [{{table: shop.orders}}, {{table: shop.customers, from_key: '1', to_key: '500'}}]),
     Launch Run: the running stream backfills them online; each asset gets an observation.
  7. Terminate the stream run: it commits, checkpoints and stops cleanly.
""", flush=True)
        while env.dagster.poll() is None:
            time.sleep(1)
        return env.dagster.returncode or 0
    except KeyboardInterrupt:
        return 0
    finally:
        print("stopping dagster dev and MariaDB ...", flush=True)
        env.stop()


if __name__ == "__main__":
    sys.exit(main())
