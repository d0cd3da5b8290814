"""Schema-change hold time: how long a table is held from its DDL to the stream resuming
it, when the change is applied inline (stream.schema_changes: inline).

    .venv/bin/python bench/schema_hold.py [--rows N] [--behaviors lenient,evolve]

One run starts a throwaway MariaDB (devtools.local_mariadb). For each behaviour: the
DDL matrix of tests/test_schema_evolution.py (10 cases, one table each, N rows loaded
before the stream starts), each case's DDL between writes, then one
``StreamEngine(until_now)`` run. The hold of each change is what the engine records in
``_binlake/schema_history`` (``held_ms``: from reading the DDL, after the batch before
it was committed, to the change recorded as applied or skipped). Reported per
behaviour: p50, p95 and max over the matrix, and how many changes rewrote the table.
Figures go to bench/out/schema_hold.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cdc_core.config import parse_config  # noqa: E402
from devtools.local_mariadb import LocalMariaDB  # noqa: E402
from pipelines.lake.control_store import ControlStore  # noqa: E402
from pipelines.stream import StreamEngine  # noqa: E402
from tests.test_schema_evolution import BASE, CASES, write_matrix  # noqa: E402


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile of ``values``."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s) + 0.5) - 1))]


def measure(server: LocalMariaDB, lake: Path, behavior: str, rows: int) -> dict:
    """Hold times of the matrix under ``behavior``."""
    database = f"hold_{behavior}"
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database}")
        cur.execute(f"USE {database}")
        for case in CASES:
            cur.execute(f"CREATE TABLE {case} ({BASE})")
            cur.execute(f"INSERT INTO {case} SELECT seq + 100, seq, CONCAT('r', seq), seq / 4 FROM seq_1_to_{rows}")
        conn.commit()
    cfg = parse_config({
        "pipeline": {"name": database, "schema_change_behavior": behavior},
        "source": {"host": server.host, "port": server.port, "user": server.user, "password": server.password,
                   "server_id": 7100 + len(behavior), "tables": [rf"{database}\..*"], "startup": {"mode": "latest"}},
        "sink": {"path": str(lake)},
    })
    StreamEngine(cfg, until_now=True).run()  # empty Delta tables, checkpoint at the binlog end
    with server.connect(database) as conn, conn.cursor() as cur:
        write_matrix(cur, database)
        conn.commit()
    summary = StreamEngine(cfg, until_now=True).run()
    history = [r for r in ControlStore(str(lake), database).schema_history()
               if r.status in ("applied", "skipped") and r.held_ms is not None and r.kind != "create_table"]
    held = [r.held_ms for r in history]
    return {"behavior": behavior, "changes": len(held), "p50_ms": percentile(held, 50),
            "p95_ms": percentile(held, 95), "max_ms": max(held),
            "rewrites": sum("rewrote" in r.detail for r in history),
            "stream_seconds": round(summary.seconds, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000, help="rows per table before the stream starts")
    parser.add_argument("--behaviors", default="lenient,evolve")
    args = parser.parse_args()
    server = LocalMariaDB(server_id=1)
    results = []
    try:
        server.start()
        with tempfile.TemporaryDirectory(prefix="binlake-hold-") as work:
            for behavior in args.behaviors.split(","):
                r = measure(server, Path(work) / behavior, behavior, args.rows)
                results.append(r)
                print(f"{behavior:>10}: {r['changes']} changes, held p50 {r['p50_ms']:.0f} ms, "
                      f"p95 {r['p95_ms']:.0f} ms, max {r['max_ms']:.0f} ms; {r['rewrites']} rewrote the table "
                      f"({args.rows:,} rows per table)", flush=True)
    finally:
        server.stop()
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "schema_hold.json").write_text(json.dumps({"rows": args.rows, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
