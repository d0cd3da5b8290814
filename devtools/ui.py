"""``make ui``: a throwaway MariaDB with the demo's ``shop`` schema and live traffic, and
``dagster dev`` (webserver and daemon) on binlake's code location, wired together:

1. MariaDB in ./.ui/mariadb (removed on exit) with the shop schema and a ``binlake`` user;
2. the config ./.ui/binlake.yaml (lake in ./.ui/lake, continuous stream, schema changes
   through the Dagster sensor, two scheduled backfills, stopped);
3. ``dagster dev`` with DAGSTER_HOME=./.ui/dagster_home (the shipped dagster.yaml) on
   http://127.0.0.1:3000 (``--port``; ``--dir`` puts ./.ui elsewhere), which discovers the
   tables at its start, a slow trickle of shop traffic meanwhile.

Every way of stopping it (Ctrl-C, SIGTERM, SIGHUP, its parent dying) stops what it started:
``dagster dev`` with its process group (webserver, daemon, code servers, runs) and MariaDB
(tests/test_make_ui.py).

The functions that start ``dagster dev`` and talk GraphQL to it are shared with the
end-to-end test (tests/test_dagster_e2e.py) and the screenshot script (devtools/screenshots.py).
Run with ``.venv/bin/python -m devtools.ui`` from the repository root.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
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


def start_dagster(command: list[str], config: Path, home: Path, log: Path, env: dict | None = None
                  ) -> subprocess.Popen:
    """A Dagster command of the virtualenv (``dagster dev``, ``dagster-daemon run``,
    ``dagster-webserver``…) run from the repository root for the binlake config ``config``, in a
    process group of its own (``stop_dagster`` stops it and everything it starts)."""
    env = dict(os.environ, BINLAKE_CONFIG=str(config), DAGSTER_HOME=str(home), VIRTUAL_ENV=str(BIN.parent),
               **(env or {}))
    out = log.open("ab")
    return subprocess.Popen([str(BIN / command[0]), *command[1:]], cwd=ROOT, env=env, stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)


def start_dagster_dev(config: Path, home: Path, port: int, log: Path) -> subprocess.Popen:
    """``dagster dev`` (webserver + daemon) on ``workspace.yaml`` for the binlake config ``config``."""
    return start_dagster(["dagster", "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
                         config, home, log)


def group_members(pgid: int) -> list[int]:
    """The live processes (not zombies) of process group ``pgid`` (Linux: read from /proc)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (comm)": state ppid pgrp ...
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def stop_dagster(*procs: subprocess.Popen, timeout: float = 60) -> None:
    """Stop processes started by ``start_dagster`` and every process of their groups (webserver,
    daemon, code servers, run workers: a stream run commits its batch and stops), all at once:
    SIGTERM, SIGKILL to what is left after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)

    def running() -> list[subprocess.Popen]:
        return [p for p in procs if p.poll() is None or group_members(p.pid)]

    while running() and time.monotonic() < deadline:
        time.sleep(0.2)
    for proc in running():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    for proc in procs:
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


def launch_snapshot(port: int, tables: list[str], partitions: list[str] | None = None) -> str:
    """Materialise every chunk partition of ``tables`` (the UI's 'Materialize all'), or only the
    chunk partitions ``partitions``, as a Dagster backfill; returns the backfill id."""
    chosen = {"partitionNames": partitions} if partitions is not None else {"allPartitions": True}
    params = {"assetSelection": [{"path": t.split(".", 1)} for t in tables], **chosen, "title": "binlake snapshot"}
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


# The scheduled backfills of `make ui` (dagster.backfills): examples, stopped until started in the UI.
UI_BACKFILLS = [
    {"name": "orders_weekly", "cron": "0 3 * * sun", "tables": [r"shop\.orders"], "timezone": "Europe/Paris"},
    {"name": "shop_nightly_repair", "cron": "30 2 * * *", "tables": [r"shop\..*"], "repair_only": True},
]


def ui_config(server, lake: Path, path: Path, password_var: str, backfills: list[dict] | None = None) -> Path:
    """The config ``make ui`` runs: the demo's source, a continuous stream, schema changes via
    Dagster, the scheduled backfills ``backfills`` (default ``UI_BACKFILLS``)."""
    import yaml

    cfg = {
        "pipeline": {"name": "shop_ui", "parallelism": 2, "schema_change_behavior": "lenient"},
        "source": {"host": server.host, "port": server.port, "user": "binlake", "password": f"${{{password_var}}}",
                   "server_id": 5400, "tables": [r"shop\..*"], "snapshot": {"chunk_size": 500}},
        "sink": {"path": str(lake)},
        "stream": {"max_batch_seconds": 1.0, "heartbeat_seconds": 5},
        "dagster": {"stream": {"mode": "continuous"}, "idle_offset_seconds": 30, "max_lag_seconds": 60,
                    "freshness": {"fail_after_seconds": 600, "warn_after_seconds": 120},
                    "backfills": UI_BACKFILLS if backfills is None else backfills},
    }
    path.write_text("# written by `make ui` (devtools/ui.py)\n" + yaml.safe_dump(cfg, sort_keys=False))
    return path


class UiEnvironment:
    """MariaDB with the shop schema, the config, and ``dagster dev``: started by ``start()``,
    removed by ``stop()`` (the lake and Dagster's history stay in ``base``, ./.ui by default).
    The table catalog is not written here: the first ``dagster dev`` discovers the tables
    (orchestration/component.py)."""

    def __init__(self, port: int = 3000, base: Path = UI_DIR, backfills: list[dict] | None = None):
        self.port, self.base, self.backfills = port, base, backfills
        self.server = self.dagster = self.traffic = None
        self.config = base / "binlake.yaml"

    def start(self, traffic_pause: float = 0.25) -> UiEnvironment:
        import random
        import secrets

        from devtools.demo import PASSWORD_VAR, Traffic, load_shop
        from devtools.local_mariadb import LocalMariaDB

        for old in ("mariadb", "lake", "dagster_home"):
            shutil.rmtree(self.base / old, ignore_errors=True)
        (self.base / "mariadb").mkdir(parents=True)
        # Kept before it starts: a stop signal during the start still stops the server.
        self.server = LocalMariaDB(server_id=1, base_dir=(self.base / "mariadb").resolve(),
                                   extra_args=("--innodb-buffer-pool-size=128M",))
        self.server.start()
        os.environ.setdefault(PASSWORD_VAR, secrets.token_urlsafe(16))
        with self.server.connect() as conn:
            loaded = load_shop(conn, random.Random(42))
            with conn.cursor() as cur:
                cur.execute("CREATE USER 'binlake'@'%%' IDENTIFIED BY %s", (os.environ[PASSWORD_VAR],))
                cur.execute("GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'binlake'@'%'")
        print(f"MariaDB on {self.server.host}:{self.server.port}: "
              + ", ".join(f"{t} {n:,} rows" for t, n in loaded.items()), flush=True)
        ui_config(self.server, (self.base / "lake").resolve(), self.config, PASSWORD_VAR, self.backfills)
        self.traffic = Traffic(self.server, random.Random(7), pause=traffic_pause).start()
        self.dagster = start_dagster_dev(self.config, dagster_home(self.base / "dagster_home"), self.port,
                                         self.base / "dagster.log")
        wait_for_webserver(self.port, self.dagster)
        return self

    def stop(self) -> None:
        if self.traffic is not None:
            self.traffic.stop()
        if self.dagster is not None:
            stop_dagster(self.dagster)
        if self.server is not None:
            self.server.stop()
            shutil.rmtree(self.base / "mariadb", ignore_errors=True)


class Stopped(Exception):
    """A stop signal (SIGTERM, SIGHUP, or the parent's death) arrived."""


def _raise_stopped(signum: int, _frame) -> None:
    raise Stopped(signal.Signals(signum).name)


def stop_with_parent() -> None:
    """SIGTERM this process when its parent dies (Linux ``PR_SET_PDEATHSIG``); at once if the
    parent is gone already."""
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):  # not Linux: a dying parent is not noticed
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


@contextlib.contextmanager
def until_stopped():
    """The block runs until it ends or is stopped: Ctrl-C (SIGINT), SIGTERM (``kill``, a
    supervisor), SIGHUP (the terminal closed) or the death of this process's parent end it
    quietly; after it, further stop signals are ignored, so the cleanup that follows runs to
    its end."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_stopped)
    stop_with_parent()
    try:
        yield
    except (KeyboardInterrupt, Stopped):
        pass
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)


GUIDE = """
Dagster UI: http://127.0.0.1:{port}   (Ctrl-C stops everything)

  1. Assets → shop: one asset per table (discovered by dagster dev at its start); each asset's
     partitions are its snapshot chunks (snapshot_partitions_sensor adds them within ~30 s).
  2. Select the three assets → Materialize → all partitions: one run per table, whose chunks are
     read in threads of that run's process (on one machine no Spark starts: source.snapshot.runner).
  3. When every chunk is done, stream_handoff_sensor launches binlake_stream (continuous);
     a table's asset page then shows its offset (binlog file/pos, _cdc_seq, Delta version,
     rows by op, lag) after every micro-batch, with plots.
  4. Change the schema (mariadb -h 127.0.0.1 -P {mariadb_port} -u root -p shop; the root password is
     ROOT_PASSWORD in devtools/local_mariadb.py), e.g. ALTER TABLE shop.customers ADD COLUMN tier INT:
     schema_change_sensor launches apply_schema_changes, and the column appears on the asset.
  5. Jobs → binlake_reconcile → Launch (nightly on its schedule): each table's checksum_parity check
     compares MySQL and Delta chunk by chunk; where it fails, launch binlake_repair from its
     Launchpad to backfill exactly the differing chunks through the running stream.
  6. Jobs → binlake_backfill → Launchpad: list tables, each with an optional key range
     (tables: [{{table: shop.orders}}, {{table: shop.customers, from_key: '1', to_key: '500'}}]),
     Launch Run: the running stream backfills them online; each asset gets an observation.
  7. Automation → binlake_backfill_orders_weekly, binlake_backfill_shop_nightly_repair: the
     scheduled backfills of dagster.backfills (stopped: start one to let it tick).
  8. Terminate the stream run: it commits, checkpoints and stops cleanly.
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=3000)
    parser.add_argument("--dir", type=Path, default=UI_DIR, help="where the lake, MariaDB and Dagster's home go")
    args = parser.parse_args()
    env = UiEnvironment(args.port, base=args.dir.resolve())
    code = 0
    try:
        with until_stopped():  # every way of stopping `make ui` ends here, then the finally stops everything
            print(f"starting MariaDB, loading the shop schema and starting dagster dev (its log: {env.base}/"
                  "dagster.log) ...", flush=True)
            env.start()
            print(GUIDE.format(port=args.port, mariadb_port=env.server.port), flush=True)
            while env.dagster.poll() is None:
                time.sleep(1)
            code = env.dagster.returncode or 0
    finally:
        print("stopping dagster dev and MariaDB ...", flush=True)
        env.stop()
    return code


if __name__ == "__main__":
    sys.exit(main())
