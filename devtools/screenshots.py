"""Screenshots of binlake in the Dagster UI for docs/dagster.md, taken with headless Chromium.

Starts what ``make ui`` starts (MariaDB with the shop schema and live traffic, ``dagster dev``),
launches the snapshot through GraphQL, lets the hand-off sensor start the (continuous) stream,
and photographs, as the pipeline gets there:

1. the asset graph, the partitions of a snapshot (one per chunk);
2. a table's asset page with its latest offset, and its offsets over time (the metadata of
   every stream materialization plotted: binlog position, ``_cdc_seq``, Delta version, rows
   by op, lag), and its event list;
3. the stream job's runs and the stream run, the hand-off sensor's ticks (waiting for the
   snapshot, then the one launch);
4. a DDL in MariaDB: the schema sensor's tick, the schema-change run, the new column on the asset;
5. an online backfill of two tables in one launch (one of them a key range): the Launchpad
   with its run config, and the run logging each table's progress while the stream runs;
6. scheduled backfills: the schedules (the two of ``make ui``, stopped, and one every minute,
   started here as with the UI's toggle), that schedule's tick and the run it launched, done by
   the running stream; the schedule is stopped again after its first run;
7. checksum parity: the traffic paused and rows deleted from one table's Delta by hand, the
   nightly reconciliation job (``binlake_reconcile``) fails that table's ``checksum_parity``
   check, listing the differing chunk; ``binlake_repair`` backfills it through the running
   stream and the check passes again.

``--only NAME...`` saves only those screenshots (and skips the steps that take none of them;
the snapshot and the stream always run).

The environment lives in a neutral temporary folder, not in the checkout: the asset pages
show the lake's path. PNGs go to docs/screenshots/. Needs Debian's ``chromium`` (``apt-get install -y chromium``)
and Python's ``playwright`` (``pip install playwright``; the system Chromium is used, no
browser download). Both are installed when missing. Run from the repository root:
``.venv/bin/python devtools/screenshots.py`` (``make screenshots``).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OUT = ROOT / "docs" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
TABLES = ["shop.customers", "shop.orders", "shop.order_items"]
DAMAGED = "shop.customers"  # its Delta loses rows by hand; reconciliation finds them, the repair restores them
DAMAGE = "id <= 40"
BACKFILL = """ops:
  backfill_table:
    config:
      tables:
        - table: shop.order_items
        - table: shop.orders
          from_key: "1"
          to_key: "1000"
"""


def install() -> None:
    """Debian's chromium and Python's playwright, when missing."""
    if not Path(CHROMIUM).exists():
        sudo = [] if subprocess.run(["id", "-u"], capture_output=True, text=True).stdout.strip() == "0" else ["sudo"]
        subprocess.run([*sudo, "apt-get", "update", "-q"], check=True)
        subprocess.run([*sudo, "apt-get", "install", "-y", "-q", "chromium"], check=True)
    try:
        import playwright  # noqa: F401
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "playwright"], check=True)


def wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(2)
    return value


# The scheduled backfill photographed: stopped in the config, started by this script.
SCHEDULED = {"name": "order_items_every_minute", "cron": "* * * * *", "tables": [r"shop\.order_items"],
             "from_key": "1", "to_key": "2000"}
START_SCHEDULE = """mutation($s: ScheduleSelector!) { startSchedule(scheduleSelector: $s) { __typename
  ... on ScheduleStateResult { scheduleState { id } } ... on PythonError { message } } }"""
STOP_SCHEDULE = """mutation($id: String!) { stopRunningSchedule(id: $id) { __typename
  ... on PythonError { message } } }"""
# The screenshots each step takes (the snapshot's step always runs: the others need the stream).
STEPS = {"schema_change": {"schema-change-run", "schema-sensor", "asset-customers-columns"},
         "backfill": {"backfill-launchpad", "backfill-run"},
         "scheduled_backfill": {"schedules", "scheduled-backfill-ticks", "scheduled-backfill-run"},
         "checksum_parity": {"checksum-failed", "checksum-failed-chunks", "checksum-repaired", "repair-run"}}


class Camera:
    """A headless Chromium page on the UI: ``visit`` waits for a text (the UI renders with
    JavaScript and polls, so 'network idle' never comes), ``save`` writes a PNG (only those
    named in ``only``, when given)."""

    def __init__(self, playwright, port: int, only: set[str] | None = None):
        self.base = f"http://127.0.0.1:{port}"
        self.only = only
        self.browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        self.page = self.browser.new_page(viewport={"width": 1600, "height": 1000})
        self.page.set_default_timeout(180_000)
        OUT.mkdir(parents=True, exist_ok=True)

    def visit(self, path: str, text: str, height: int = 1000) -> None:
        page = self.page
        page.set_viewport_size({"width": 1600, "height": height})
        page.goto(self.base + path, wait_until="domcontentloaded")
        page.get_by_text(text).first.wait_for()
        page.wait_for_timeout(3000)
        skip = page.get_by_role("button", name="Skip")  # the "Join the Dagster community" dialog
        if skip.count():
            skip.first.click()
            page.wait_for_timeout(1000)

    def save(self, name: str) -> None:
        if self.only is not None and name not in self.only:
            return
        self.page.screenshot(path=str(OUT / f"{name}.png"))
        print(f"docs/screenshots/{name}.png", flush=True)


def runs_of(instance, job: str, statuses=None):
    from dagster import RunsFilter

    return instance.get_runs(RunsFilter(job_name=job, statuses=statuses or []))


def finished(instance, run_id: str):
    run = instance.get_run_by_id(run_id)
    return run if run.is_finished else None


def snapshot_and_stream(env, instance, cam: Camera) -> str:
    """Partitions, the snapshot, the hand-off, offsets over time; returns the stream run's id."""
    from dagster import DagsterRunStatus

    from devtools.ui import launch_snapshot

    wait(lambda: all(instance.get_dynamic_partitions(f"binlake_chunks__shop__{t.split('.')[1]}") for t in TABLES),
         300, "chunk partitions")
    launch_snapshot(env.port, TABLES)
    stream = wait(lambda: runs_of(instance, "binlake_stream", [DagsterRunStatus.STARTED]), 1200, "the stream")[0]
    print("stream running; letting offsets accumulate", flush=True)
    time.sleep(120)
    cam.visit("/asset-groups/shop", "order_items")
    cam.save("asset-graph")
    cam.visit("/assets/shop/order_items?view=partitions", "chunk-0000")
    cam.page.get_by_text("chunk-0003").first.click()  # a chunk's own materialization: rows, watermarks
    cam.page.wait_for_timeout(3000)
    cam.save("partitions")
    cam.visit("/assets/shop/orders", "binlake/binlog_pos", height=1900)  # the latest offset, the columns
    cam.save("asset-orders")
    offsets_over_time(cam)
    cam.visit("/assets/shop/orders?view=events", "stream batch committed")
    cam.save("asset-orders-events")
    cam.visit("/locations/binlake/jobs/binlake_stream/runs", "binlake_stream")
    cam.save("stream-runs")
    cam.visit(f"/runs/{stream.run_id}", "stream batch committed")
    cam.save("stream-run")
    sensor_launches(cam, "stream_handoff_sensor", "handoff-sensor")
    return stream.run_id


def sensor_launches(cam: Camera, sensor: str, name: str) -> None:
    """A sensor's page with its ticks filtered to those that requested runs (with the runs)."""
    cam.visit(f"/locations/binlake/sensors/{sensor}", "Evaluations")
    cam.page.locator("button", has_text="All ticks").first.click()
    cam.page.get_by_role("menuitem", name="Requested").first.click()
    cam.page.locator("tr", has_text="run requested").first.wait_for()
    cam.page.wait_for_timeout(2000)
    cam.save(name)


def offsets_over_time(cam: Camera) -> None:
    """The asset page's metadata plotted by event (not by partition): each stream
    materialization's offset, rows by op and lag, over time."""
    page = cam.page
    cam.visit("/assets/shop/orders", "binlake/binlog_pos", height=2600)
    page.locator("button", has_text="Plots").first.click()  # Table | Plots
    page.locator("button", has_text="Events").first.click()  # Partitions | Events
    page.get_by_text("binlake/lag_seconds").first.wait_for()
    page.wait_for_timeout(4000)
    lineage = page.locator("button", has_text="Lineage").first.bounding_box()
    if cam.only is not None and "asset-orders-offsets" not in cam.only:
        return
    page.screenshot(path=str(OUT / "asset-orders-offsets.png"), clip={"x": 0, "y": 0, "width": 1600,
                                                                      "height": lineage["y"]})
    print("docs/screenshots/asset-orders-offsets.png", flush=True)


def schema_change(env, instance, cam: Camera) -> None:
    from dagster import DagsterRunStatus

    with env.server.connect(database="shop") as conn, conn.cursor() as cur:
        cur.execute("ALTER TABLE customers ADD COLUMN tier TINYINT NOT NULL DEFAULT 1")
    schema = wait(lambda: runs_of(instance, "apply_schema_changes", [DagsterRunStatus.SUCCESS]), 600,
                  "schema run")[0]
    time.sleep(30)
    cam.visit(f"/runs/{schema.run_id}", "schema change")
    cam.save("schema-change-run")
    sensor_launches(cam, "schema_change_sensor", "schema-sensor")
    cam.visit("/assets/shop/customers", "tier", height=1900)
    cam.save("asset-customers-columns")


def backfill(env, instance, cam: Camera) -> None:
    """The Launchpad of binlake_backfill holding a selection of two tables, and its run."""
    import yaml

    from devtools.ui import launch_job

    cam.visit("/locations/binlake/pipeline_or_job/binlake_backfill/playground/setup?"
              + urllib.parse.urlencode({"config": BACKFILL}), "from_key")
    cam.save("backfill-launchpad")
    run_id = launch_job(env.port, "binlake_backfill", yaml.safe_load(BACKFILL))  # the Launch Run button
    wait(lambda: finished(instance, run_id), 900, "the backfill")
    cam.visit(f"/runs/{run_id}", "binlake/backfills", height=1800)  # a finished run shows its log's end
    cam.save("backfill-run")


def scheduled_backfill(env, instance, cam: Camera) -> None:
    """The schedules, one started (as the UI's toggle does), its tick and the run it launched."""
    from dagster import RunsFilter

    from devtools.ui import graphql

    schedule = "binlake_backfill_" + SCHEDULED["name"]
    selector = {"repositoryLocationName": "binlake", "repositoryName": "__repository__", "scheduleName": schedule}
    started = graphql(env.port, START_SCHEDULE, {"s": selector})["startSchedule"]
    if started["__typename"] != "ScheduleStateResult":
        raise RuntimeError(f"{schedule} not started: {started}")
    cam.visit("/automation", "binlake_backfill_orders_weekly")
    cam.save("schedules")
    run = wait(lambda: [r for r in instance.get_runs(RunsFilter(tags={"dagster/schedule_name": schedule}))
                        if r.is_finished], 600, "the scheduled backfill's run")[-1]
    graphql(env.port, STOP_SCHEDULE, {"id": started["scheduleState"]["id"]})  # once is enough for the pictures
    cam.visit(f"/locations/binlake/schedules/{schedule}", "1 run requested")
    cam.save("scheduled-backfill-ticks")
    cam.visit(f"/runs/{run.run_id}", "binlake/backfills", height=1800)
    cam.save("scheduled-backfill-run")


def checksum_parity(env, instance, cam: Camera) -> None:
    """Damage one table's Delta with the traffic paused, let the nightly reconciliation find
    it, repair it from the UI's jobs, photograph both states of the check."""
    from deltalake import DeltaTable

    from cdc_core.config import load_config
    from devtools.ui import launch_job
    from pipelines.lake.tables import table_uri

    env.traffic.stop()  # no writes: the damage is the only difference, and no commit races the DELETE
    env.traffic = None
    time.sleep(15)  # the stream applies what is in flight
    DeltaTable(table_uri(load_config(env.config).sink.path, DAMAGED)).delete(DAMAGE)
    nightly = launch_job(env.port, "binlake_reconcile")  # what binlake_reconcile_schedule launches at night
    wait(lambda: finished(instance, nightly), 600, "the reconciliation")
    history(cam, "Failed")
    cam.save("checksum-failed")
    cam.page.locator("tr", has_text="Failed").first.locator("button").last.click()  # its metadata
    cam.page.get_by_text("binlake/differing_chunks").first.wait_for()
    cam.page.wait_for_timeout(2000)
    cam.save("checksum-failed-chunks")
    repair = launch_job(env.port, "binlake_repair", {"ops": {"repair_chunks": {"config": {"tables": [DAMAGED]}}}})
    wait(lambda: finished(instance, repair), 900, "the repair")
    history(cam, "Passed")
    cam.save("checksum-repaired")
    cam.visit(f"/runs/{repair}", "binlake/rows_backfilled")
    cam.save("repair-run")


def history(cam: Camera, status: str) -> None:
    """The damaged table's checksum_parity check: its execution history, the latest ``status``.
    (A table the stream materializes all the time shows its checks "Not evaluated" in the list:
    Dagster counts a check for the materialization it ran after, and a newer one has come.)"""
    cam.visit(f"/assets/{DAMAGED.replace('.', '/')}?view=checks", "checksum_parity")
    cam.page.get_by_text("checksum_parity").first.click()
    cam.page.get_by_text("Execution history").first.click()
    cam.page.locator("tr", has_text=status).first.wait_for()
    cam.page.wait_for_timeout(2000)


def main() -> int:
    from dagster import DagsterInstance
    from playwright.sync_api import sync_playwright

    from devtools.ui import UI_BACKFILLS, UiEnvironment

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=3333)
    parser.add_argument("--only", nargs="+", metavar="NAME", help="save only these screenshots (names without .png)")
    args = parser.parse_args()
    only = set(args.only) if args.only else None
    install()
    env = UiEnvironment(args.port, base=Path(tempfile.gettempdir()) / "binlake-screenshots",
                        backfills=[*UI_BACKFILLS, SCHEDULED])
    try:
        env.start(traffic_pause=0.1)
        instance = DagsterInstance.from_config(str(env.base / "dagster_home"))
        with sync_playwright() as p:
            cam = Camera(p, args.port, only)
            snapshot_and_stream(env, instance, cam)
            for step in (schema_change, backfill, scheduled_backfill, checksum_parity):
                if only is None or only & STEPS[step.__name__]:
                    step(env, instance, cam)
            cam.browser.close()
    except BaseException:
        log = env.base / "dagster.log"
        if log.exists():
            print(log.read_text()[-20000:], file=sys.stderr)  # what Dagster did, shown with the failure
        raise
    finally:
        env.stop()
        shutil.rmtree(env.base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
