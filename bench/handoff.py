"""Cost of the hand-off filter per row event with a case-insensitive string key.

    .venv/bin/python bench/handoff.py [--rows N] [--chunk-size C] [--events M] [--repeat K]

One run starts a throwaway MariaDB (devtools.local_mariadb), loads N rows into a table
keyed on VARCHAR(16) COLLATE utf8mb4_unicode_ci (keys of mixed case), plans its chunks
with the snapshot's planner and gives every chunk its own high watermark. It then times
``HandoffFilter.drops`` for M row events inside the hand-off window (so each key must be
placed in its chunk), each event with fresh keys (no cache hits), for:

  (a) Python order: the filter before the server's order (wrong for this collation; the
      cost baseline, no round trip);
  (b) the collation's sort keys (one WEIGHT_STRING query per event);
  (c) the server's comparisons (one query per event, the bounds sent with it; used for
      collations whose sort keys disagree with their comparisons);
  (d) as (b), every key already cached (no query).

for events of 1 row and of 50 rows, K rounds alternating, and prints the median
microseconds per event and the ratio to (a). Figures go to bench/out/handoff.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cdc_core.chunks.handoff import HandoffFilter  # noqa: E402
from cdc_core.chunks.planning import plan_chunks  # noqa: E402
from cdc_core.offset.position import BinlogPosition  # noqa: E402
from cdc_core.schema.table import describe_table  # noqa: E402
from cdc_core.types.key_order import ComparisonOrder, KeyOrders, PythonOrder, ServerSql, WeightOrder  # noqa: E402
from devtools.local_mariadb import LocalMariaDB  # noqa: E402


def _key(rng: random.Random) -> str:
    return "".join(rng.choice("aAbBcCdDeEfF") for _ in range(3)) + str(rng.randrange(10**6))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--chunk-size", type=int, default=1000)
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rng = random.Random(1)
    with LocalMariaDB(server_id=9) as server, server.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE bench DEFAULT CHARSET utf8mb4")
        cur.execute("USE bench")
        cur.execute("CREATE TABLE t (id VARCHAR(16) COLLATE utf8mb4_unicode_ci PRIMARY KEY)")
        for _ in range(max(args.rows // 10_000, 1)):
            cur.executemany("INSERT IGNORE INTO t VALUES (%s)", [(_key(rng),) for _ in range(10_000)])
        conn.commit()
        schema = describe_table(cur, "bench", "t")
        chunks = plan_chunks(cur, schema, "id", args.chunk_size)
        hws = {c.index: BinlogPosition("b.000001", 1000 + c.index) for c in chunks}
        inside = BinlogPosition("b.000001", 1000 + len(chunks) // 2)
        sql = ServerSql.on(conn)
        weights = KeyOrders(sql).for_column(schema.column("id"))
        assert isinstance(weights, WeightOrder)
        orders = {"a_python": PythonOrder(), "b_sort_keys": weights,
                  "c_comparisons": ComparisonOrder(sql, weights.collation), "d_cached": weights}
        results: dict[str, dict[str, list[float]]] = {}
        for rows_per_event in (1, 50):
            events = [[_key(rng) for _ in range(rows_per_event)] for _ in range(args.events)]
            for _ in range(args.repeat):
                for name, order in orders.items():
                    f = HandoffFilter(chunks, hws, order)
                    f.chunk_for("")  # the bounds' sort keys, fetched once
                    if name == "d_cached":
                        for keys in events:
                            f.drops(keys, inside)
                    t = time.perf_counter()
                    for keys in events:
                        f.drops(keys, inside)
                    per_event = (time.perf_counter() - t) / len(events) * 1e6
                    results.setdefault(f"{rows_per_event}_rows", {}).setdefault(name, []).append(per_event)
    load = os.getloadavg()
    summary = {"rows": args.rows, "chunks": len(chunks), "events": args.events, "repeat": args.repeat,
               "load_average": load, "median_us_per_event": {}}
    print(f"{args.rows} rows, {len(chunks)} chunks, {args.events} events x {args.repeat} rounds; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    for size, by_order in results.items():
        base = statistics.median(by_order["a_python"])
        summary["median_us_per_event"][size] = {}
        for name, times in by_order.items():
            med = statistics.median(times)
            summary["median_us_per_event"][size][name] = med
            print(f"  events of {size.replace('_', ' ')}: {name:14s} {med:9.1f} us/event  x{med / base:6.1f} of (a)")
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "handoff.json").write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
