"""``make demo``: a throwaway MariaDB → Delta Lake run of binlake, end to end.

1. Starts a private MariaDB (data in ./.demo/mariadb, removed on exit, also on Ctrl-C),
   loads a sample ``shop`` schema and creates a least-privilege ``binlake`` user.
2. A background writer plays live shop traffic (inserts, updates, deletes) while
   ``binlake validate`` checks the server.
3. ``binlake snapshot`` copies every ``shop`` table into ./demo-lake while the writes go on
   (on ``local[*]`` its chunk groups run in binlake's threads, Spark not started).
4. ``binlake stream --until now`` catches up; an ALTER TABLE runs and is streamed.
5. Every table is compared with MySQL row by row (pipelines.reconcile.rows).
6. ``binlake snapshot`` and ``binlake stream --until now`` again: no new Delta commits.

Run with ``.venv/bin/python -m devtools.demo`` from the repository root.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import shutil
import signal
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import yaml
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

DEMO_DIR = Path(".demo")
LAKE = Path("demo-lake")
PASSWORD_VAR = "BINLAKE_DEMO_PASSWORD"
TABLES = ("shop.customers", "shop.orders", "shop.order_items")
N_CUSTOMERS, N_ORDERS = 1_000, 3_000
TRAFFIC_SECONDS = 3.0

console = Console()

SCHEMA = [
    "CREATE DATABASE shop DEFAULT CHARSET utf8mb4",
    """CREATE TABLE shop.customers (
        id INT AUTO_INCREMENT PRIMARY KEY,
        email VARCHAR(120) NOT NULL UNIQUE,
        name VARCHAR(80) NOT NULL,
        country CHAR(2),
        created_at DATETIME(3) NOT NULL)""",
    """CREATE TABLE shop.orders (
        id BIGINT PRIMARY KEY,
        customer_id INT NOT NULL,
        status ENUM('new', 'paid', 'shipped', 'cancelled') NOT NULL,
        total DECIMAL(12, 2) NOT NULL,
        placed_at DATETIME NOT NULL,
        attrs JSON,
        KEY (customer_id))""",
    """CREATE TABLE shop.order_items (
        order_id BIGINT NOT NULL,
        line SMALLINT NOT NULL,
        sku VARCHAR(20) NOT NULL,
        qty INT NOT NULL,
        unit_price DECIMAL(10, 2) NOT NULL,
        PRIMARY KEY (order_id, line))""",
]
FIRST = ["Ada", "Grace", "Linus", "Zoë", "Łukasz", "Søren", "Amélie", "李", "Ngozi", "Mateo", "Aiko", "Olu"]
LAST = ["Lovelace", "Hopper", "Torvalds", "Müller", "Kowalski", "Kierkegaard", "Dubois", "Wei", "Okafor", "García"]
COUNTRIES = ["GB", "US", "FI", "DE", "PL", "DK", "FR", "CN", "NG", "ES", "JP", None]
STATUSES = ["new", "paid", "shipped", "cancelled"]


def _attrs(rng: random.Random) -> str:
    return json.dumps({"channel": rng.choice(["web", "app", "store"]), "gift": rng.random() < 0.1,
                       "coupon": rng.choice([None, "WELCOME10", "SUMMER"]),
                       "tags": rng.sample(["fragile", "express", "b2b", "eco"], rng.randint(0, 2))})


def _items(rng: random.Random, order_id: int) -> list[tuple]:
    return [(order_id, line, f"SKU-{rng.randint(1, 400):04d}", rng.randint(1, 5),
             Decimal(rng.randint(99, 19999)) / 100) for line in range(1, rng.randint(1, 4) + 1)]


def _placed_at(rng: random.Random) -> str:
    month, day, hour, minute = rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 23), rng.randint(0, 59)
    return f"2024-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:00"


def load_shop(conn, rng: random.Random) -> dict[str, int]:
    """Create the shop schema and fill it; returns rows per table."""
    with conn.cursor() as cur:
        for stmt in SCHEMA:
            cur.execute(stmt)
        customers = [(f"customer{i}@example.com", f"{rng.choice(FIRST)} {rng.choice(LAST)}", rng.choice(COUNTRIES),
                      f"2023-01-01 00:00:00.{i % 1000:03d}") for i in range(1, N_CUSTOMERS + 1)]
        cur.executemany("INSERT INTO shop.customers (email, name, country, created_at) VALUES (%s, %s, %s, %s)",
                        customers)
        orders, items = [], []
        for oid in range(1, N_ORDERS + 1):
            lines = _items(rng, oid)
            items += lines
            orders.append((oid, rng.randint(1, N_CUSTOMERS), rng.choice(STATUSES),
                           sum(q * p for _, _, _, q, p in lines), _placed_at(rng), _attrs(rng)))
        cur.executemany("INSERT INTO shop.orders VALUES (%s, %s, %s, %s, %s, %s)", orders)
        cur.executemany("INSERT INTO shop.order_items VALUES (%s, %s, %s, %s, %s)", items)
    return {"shop.customers": len(customers), "shop.orders": len(orders), "shop.order_items": len(items)}


@dataclass
class Traffic:
    """Live shop traffic on its own connection and thread: new orders, status changes, edits, cancellations."""

    server: object
    rng: random.Random
    ops: Counter = field(default_factory=Counter)  # (table, op) -> rows
    stop_event: threading.Event = field(default_factory=threading.Event)
    pause: float = 0.004  # seconds between operations
    error: BaseException | None = None
    _thread: threading.Thread | None = None

    def start(self) -> Traffic:
        self._thread = threading.Thread(target=self._run, name="demo-traffic", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        if self._thread is not None:
            self._thread.join(30)

    def _run(self) -> None:
        try:
            with self.server.connect(database="shop") as conn:
                next_order = N_ORDERS + 1
                while not self.stop_event.is_set():
                    next_order = self._step(conn, next_order)
                    time.sleep(self.pause)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            self.error = e

    def _step(self, conn, next_order: int) -> int:
        rng, n = self.rng, self.ops
        with conn.cursor() as cur:
            r = rng.random()
            if r < 0.35:  # a new order with its lines, in one transaction
                lines = _items(rng, next_order)
                conn.begin()
                cur.execute("INSERT INTO orders (id, customer_id, status, total, placed_at, attrs) "
                            "VALUES (%s, %s, 'new', %s, %s, %s)",
                            (next_order, rng.randint(1, N_CUSTOMERS), sum(q * p for _, _, _, q, p in lines),
                             _placed_at(rng), _attrs(rng)))
                cur.executemany("INSERT INTO order_items VALUES (%s, %s, %s, %s, %s)", lines)
                conn.commit()
                n["shop.orders", "insert"] += 1
                n["shop.order_items", "insert"] += len(lines)
                return next_order + 1
            oid = rng.randint(1, next_order - 1)
            if r < 0.65:
                n["shop.orders", "update"] += cur.execute(
                    "UPDATE orders SET status = %s, attrs = JSON_SET(COALESCE(attrs, '{}'), '$.touched', %s) "
                    "WHERE id = %s", (rng.choice(STATUSES), rng.randint(1, 10**6), oid))
            elif r < 0.75:
                n["shop.order_items", "update"] += cur.execute(
                    "UPDATE order_items SET qty = qty + 1 WHERE order_id = %s AND line = 1", (oid,))
            elif r < 0.85:  # cancelled and purged: lines first, then the order
                conn.begin()
                n["shop.order_items", "delete"] += cur.execute("DELETE FROM order_items WHERE order_id = %s", (oid,))
                n["shop.orders", "delete"] += cur.execute("DELETE FROM orders WHERE id = %s", (oid,))
                conn.commit()
            elif r < 0.95:
                n["shop.customers", "update"] += cur.execute(
                    "UPDATE customers SET country = %s WHERE id = %s",
                    (rng.choice(COUNTRIES), rng.randint(1, N_CUSTOMERS)))
            else:
                n["shop.customers", "insert"] += cur.execute(
                    "INSERT INTO customers (email, name, country, created_at) VALUES (%s, %s, %s, NOW(3))",
                    (f"new{secrets.token_hex(6)}@example.com", f"{rng.choice(FIRST)} {rng.choice(LAST)}",
                     rng.choice(COUNTRIES)))
        return next_order


def write_config(server, path: Path) -> Path:
    """The binlake config of the demo: the format of docs/contracts.md, the password from the environment."""
    cfg = {
        "pipeline": {"name": "shop_demo", "parallelism": 2, "schema_change_behavior": "lenient"},
        "source": {
            "host": server.host, "port": server.port, "user": "binlake", "password": f"${{{PASSWORD_VAR}}}",
            "server_id": 5400, "server_time_zone": "UTC", "tables": [r"shop\..*"],
            "startup": {"mode": "initial"}, "snapshot": {"chunk_size": 500},
        },
        "sink": {"path": str(LAKE.resolve())},
    }
    path.write_text("# written by `make demo` (devtools/demo.py)\n" + yaml.safe_dump(cfg, sort_keys=False))
    return path


_interrupted = threading.Event()


def _interrupt(signum, frame):
    """SIGINT/SIGTERM: remember it and unwind like Ctrl-C, so the finally blocks stop MariaDB."""
    _interrupted.set()
    raise KeyboardInterrupt


def _check(rc: int, what: str) -> None:
    if _interrupted.is_set():  # the CLI turns Ctrl-C into exit code 1; the demo stops here
        raise KeyboardInterrupt
    if rc != 0:
        raise SystemExit(f"{what} failed (exit {rc})")


def _step(n: int, title: str) -> None:
    console.print()
    console.rule(f"[bold cyan]{n}. {title}")


def _delta_versions(cfg) -> dict[str, int]:
    from pipelines.lake.tables import require_table, table_uri

    return {t: require_table(table_uri(cfg.sink.path, t)).version() for t in TABLES}


def _compare_all(cfg) -> bool:
    from cdc_core.source.connection import connect, connection_settings
    from pipelines.reconcile.rows import compare_table

    t = Table(title="Delta vs MySQL, row by row (pipelines.reconcile.rows.compare)")
    t.add_column("table", no_wrap=True, min_width=max(map(len, TABLES)))
    for col in ("MySQL rows", "Delta rows", "missing", "extra", "differ", "result"):
        t.add_column(col, justify="left" if col == "result" else "right", no_wrap=col == "result")
    ok = True
    with connect(connection_settings(cfg)) as conn, conn.cursor() as cur:
        for name in TABLES:
            d = compare_table(cur, cfg, name)
            ok &= d.equal
            t.add_row(name, f"{d.mysql_rows:,}", f"{d.delta_rows:,}", str(len(d.missing)), str(len(d.extra)),
                      str(len(d.different)), "[green]✓ equal[/green]" if d.equal else "[red]✗ differs[/red]")
    console.print(t)
    return ok


def _sample(cfg) -> None:
    from pipelines.lake.reads import dataset
    from pipelines.lake.tables import delta_columns, delta_schema, require_table, table_uri

    table = require_table(table_uri(cfg.sink.path, "shop.orders"))
    row = dataset(table).to_table().sort_by("id").slice(0, 1).to_pylist()[0]
    t = Table(title="order 1 as stored in demo-lake/shop/orders (read with deltalake)")
    t.add_column("column", no_wrap=True)
    t.add_column("Delta type", no_wrap=True)
    t.add_column("value", overflow="fold")
    for c in delta_columns(delta_schema(table)):
        t.add_row(c.name, c.delta_type, str(row[c.name]))
    console.print(t)


def run() -> int:
    from cdc_core.config import load_config
    from devtools.local_mariadb import LocalMariaDB
    from pipelines import cli

    console.print(Panel.fit("[bold]binlake demo[/bold]: MariaDB → Delta Lake: chunked snapshot, binlog stream, "
                            "schema change\n"
                            "throwaway server in ./.demo, lake in ./demo-lake", border_style="cyan"))
    DEMO_DIR.mkdir(exist_ok=True)
    shutil.rmtree(DEMO_DIR / "mariadb", ignore_errors=True)
    shutil.rmtree(LAKE, ignore_errors=True)  # a fresh lake each run
    (DEMO_DIR / "mariadb").mkdir()
    server = LocalMariaDB(server_id=1, base_dir=(DEMO_DIR / "mariadb").resolve(),
                          extra_args=("--innodb-buffer-pool-size=128M",))
    traffic: Traffic | None = None
    try:
        _step(1, "Source database")
        t0 = time.monotonic()
        with console.status("starting MariaDB and loading the shop schema"):
            server.start()
            rng = random.Random(42)
            with server.connect() as conn:
                loaded = load_shop(conn, rng)
                password = os.environ.get(PASSWORD_VAR) or secrets.token_urlsafe(16)
                os.environ[PASSWORD_VAR] = password
                with conn.cursor() as cur:  # least privilege: what `binlake validate` asks for
                    cur.execute("CREATE USER 'binlake'@'%%' IDENTIFIED BY %s", (password,))
                    cur.execute("GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'binlake'@'%'")
        console.print(f"MariaDB on {server.host}:{server.port}, binlog on (ROW, FULL row image and metadata); "
                      f"started and loaded in {time.monotonic() - t0:.1f}s: "
                      + ", ".join(f"{t} {n:,} rows" for t, n in loaded.items()))
        console.print("  orders: DECIMAL total, DATETIME placed_at, ENUM status, JSON attrs; "
                      "order_items: composite primary key (order_id, line)")
        cfg_path = write_config(server, DEMO_DIR / "binlake.yaml")
        console.print(f"config: {cfg_path} (user [bold]binlake[/bold] with SELECT, REPLICATION SLAVE, "
                      f"REPLICATION CLIENT; password from ${{{PASSWORD_VAR}}})")

        _step(2, "Live traffic, and `binlake validate` against the busy server")
        traffic = Traffic(server, random.Random(7)).start()
        t0 = time.monotonic()
        _check(cli.main(["validate", "-c", str(cfg_path)]), "binlake validate")

        # On local[*] the chunk groups run in binlake's threads (source.snapshot.runner: auto); a
        # cluster master would run them as Spark tasks.
        _step(3, "`binlake snapshot` while the shop keeps writing")
        _check(cli.main(["snapshot", "-c", str(cfg_path)]), "binlake snapshot")
        cfg = load_config(cfg_path)
        console.print("Counts differ where the shop wrote during the snapshot: each chunk is exact as of its own "
                      "high watermark, and the stream catches up from there.")

        _step(4, "`binlake stream --until now` with the writer still running")
        time.sleep(max(0.0, TRAFFIC_SECONDS - (time.monotonic() - t0)))
        _check(cli.main(["stream", "-c", str(cfg_path), "--until", "now"]), "binlake stream")

        _step(5, "A schema change: ALTER TABLE shop.orders ADD COLUMN channel … while writes go on")
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("ALTER TABLE shop.orders ADD COLUMN channel VARCHAR(10) NOT NULL DEFAULT 'web' AFTER status")
            cur.execute("UPDATE shop.orders SET channel = 'app' WHERE id % 5 = 0")
        time.sleep(1.0)
        traffic.stop()
        if traffic.error:
            raise RuntimeError(f"traffic writer failed: {traffic.error}")
        t = Table(title=f"live writes in {time.monotonic() - t0:.1f}s (rows changed)")
        for col in ("table", "inserted", "updated", "deleted"):
            t.add_column(col, justify="left" if col == "table" else "right")
        for name in TABLES:
            t.add_row(name, *(f"{traffic.ops[name, op]:,}" for op in ("insert", "update", "delete")))
        console.print(t)
        _check(cli.main(["stream", "-c", str(cfg_path), "--until", "now"]), "binlake stream after the ALTER")
        from pipelines.lake.control_store import ControlStore

        for r in ControlStore(cfg.sink.path, cfg.pipeline.name).schema_history():
            if r.status in ("applied", "skipped"):
                console.print(f"  schema history: {r.description} at {r.position} → {r.detail} "
                              f"(table held {r.held_ms:.0f} ms)")
        _check(cli.main(["status", "-c", str(cfg_path)]), "binlake status")

        _step(6, "Delta equals MySQL?")
        equal = _compare_all(cfg)
        _sample(cfg)

        _step(7, "Resumable: `binlake snapshot` and `binlake stream --until now` again")
        before = _delta_versions(cfg)
        _check(cli.main(["snapshot", "-c", str(cfg_path)]), "the second binlake snapshot")
        _check(cli.main(["stream", "-c", str(cfg_path), "--until", "now"]), "the second binlake stream")
        after = _delta_versions(cfg)
        noop = before == after
        console.print(("[green]✓ no-op[/green]: every chunk has a committed record and the stream resumes at its "
                       f"checkpoint, so no table got a new Delta commit (versions {after})") if noop else
                      f"[red]✗ the re-run changed the lake: versions {before} → {after}[/red]")

        _step(8, "Summary")
        console.print(Panel(
            f"{'[green]✓' if equal else '[red]✗'} all {len(TABLES)} tables in ./demo-lake equal MySQL row by row "
            f"after a snapshot under live writes, the binlog stream and an ALTER TABLE"
            f"{'[/green]' if equal else '[/red]'}\n"
            f"{'[green]✓' if noop else '[red]✗'} a second snapshot and stream are no-ops"
            f"{'[/green]' if noop else '[/red]'}\n\n"
            "Keep it running: binlake run -c .demo/binlake.yaml (Ctrl-C stops it cleanly)\n"
            "Read the lake: python -c \"from deltalake import DeltaTable; "
            "print(DeltaTable('demo-lake/shop/orders').to_pandas())\"",
            title="binlake demo", border_style="green" if equal and noop else "red"))
        return 0 if equal and noop else 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not cut the clean-up short
            signal.signal(sig, signal.SIG_IGN)
        if traffic is not None:
            traffic.stop()
        with console.status("cleaning up: stopping MariaDB"):
            server.stop()
            shutil.rmtree(DEMO_DIR / "mariadb", ignore_errors=True)
        console.print("MariaDB stopped and .demo/mariadb removed; the lake stays in ./demo-lake.")


def main() -> int:
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return run()
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]")
        return 130
    except SystemExit as e:
        if isinstance(e.code, str):
            console.print(f"[red]{e.code}[/red]")
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
