"""Screenshots of binlake in the Dagster UI for the README, taken with headless Chromium.

Starts what ``make ui`` starts (MariaDB with the shop schema and live traffic, ``dagster dev``),
launches the snapshot through GraphQL, lets the hand-off sensor start the stream, changes a
table's schema, and photographs: the asset graph, a table's asset page (offset metadata and
its plots), the partitions of a snapshot, the stream run, the schema-change run and the
hand-off sensor's tick history. PNGs go to docs/screenshots/.

Needs Debian's ``chromium`` (``apt-get install -y chromium``) and Python's ``playwright``
(``pip install playwright``; the system Chromium is used, no browser download). Both are
installed when missing. Run from the repository root: ``.venv/bin/python docs/screenshots.py``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OUT = ROOT / "docs" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
TABLES = ["shop.customers", "shop.orders", "shop.order_items"]


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


def prepare(env, instance) -> dict[str, str]:
    """Drive the pipeline to an interesting state; returns run ids to photograph."""
    from dagster import DagsterRunStatus, RunsFilter

    from orchestration.ui import launch_snapshot

    wait(lambda: all(instance.get_dynamic_partitions(f"binlake_chunks__shop__{t.split('.')[1]}") for t in TABLES),
         300, "chunk partitions")
    launch_snapshot(env.port, TABLES)
    stream = wait(lambda: instance.get_runs(RunsFilter(job_name="binlake_stream",
                                                        statuses=[DagsterRunStatus.STARTED])), 900, "the stream")[0]
    print("stream running; letting offsets accumulate", flush=True)
    time.sleep(60)
    with env.server.connect(database="shop") as conn, conn.cursor() as cur:
        cur.execute("ALTER TABLE customers ADD COLUMN tier TINYINT NOT NULL DEFAULT 1")
    schema = wait(lambda: instance.get_runs(RunsFilter(job_name="apply_schema_changes",
                                                        statuses=[DagsterRunStatus.SUCCESS])), 600, "schema run")[0]
    time.sleep(60)
    return {"stream": stream.run_id, "schema": schema.run_id}


def shoot(port: int, runs: dict[str, str]) -> None:
    """Each page once its content is there (the UI renders with JavaScript and polls, so
    'network idle' never comes): a text to wait for, then a moment for charts."""
    from playwright.sync_api import sync_playwright

    base = f"http://127.0.0.1:{port}"
    OUT.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.set_default_timeout(180_000)

        def visit(path: str, text: str) -> None:
            page.goto(base + path, wait_until="domcontentloaded")
            page.get_by_text(text).first.wait_for()
            page.wait_for_timeout(3000)
            skip = page.get_by_role("button", name="Skip")  # the "Join the Dagster community" dialog
            if skip.count():
                skip.first.click()
                page.wait_for_timeout(1000)

        def save(name: str) -> None:
            page.screenshot(path=str(OUT / f"{name}.png"))
            print(f"docs/screenshots/{name}.png", flush=True)

        visit("/asset-groups/shop", "order_items")
        save("asset-graph")
        page.set_viewport_size({"width": 1600, "height": 1900})  # the asset page: columns and metadata
        visit("/assets/shop/orders", "binlake/binlog_pos")
        save("asset-orders")
        page.get_by_role("button", name="Plots").first.click()
        page.get_by_role("button", name="Events").first.click()  # plot the stream's materializations over time
        page.get_by_text("binlake/binlog_pos").first.wait_for()
        page.wait_for_timeout(4000)
        page.get_by_text("Metadata").first.scroll_into_view_if_needed()
        save("asset-orders-plots")
        visit("/assets/shop/customers", "tier")
        save("asset-customers-columns")
        page.set_viewport_size({"width": 1600, "height": 1000})
        visit("/assets/shop/orders?view=events", "stream batch committed")
        save("asset-orders-events")
        visit("/assets/shop/order_items?view=partitions", "chunk-0000")
        page.get_by_text("chunk-0003").first.click()  # a chunk's own materialization: rows, watermarks
        page.wait_for_timeout(3000)
        save("partitions")
        visit(f"/runs/{runs['stream']}", "stream batch committed")
        save("stream-run")
        visit(f"/runs/{runs['schema']}", "schema change")
        save("schema-change-run")
        visit("/locations/binlake/sensors/stream_handoff_sensor", "stream_handoff_sensor")
        save("handoff-sensor")
        browser.close()


def main() -> int:
    from dagster import DagsterInstance

    from orchestration.ui import UiEnvironment

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=3333)
    args = parser.parse_args()
    install()
    env = UiEnvironment(args.port, base=ROOT / ".ui-screenshots")
    try:
        env.start(traffic_pause=0.1)
        instance = DagsterInstance.from_config(str(env.base / "dagster_home"))
        shoot(args.port, prepare(env, instance))
    finally:
        env.stop()
        shutil.rmtree(env.base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
