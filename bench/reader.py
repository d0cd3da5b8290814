"""Decode rate of the stream's binlog reader (cdc_core/binlog/reader.py) alone: no engine, no Delta.

    .venv/bin/python bench/reader.py [--rows N] [--single M] [--repeat K] [--code DIR ...]

One run starts a throwaway MariaDB (devtools.local_mariadb) and writes two backlogs:
``mix``, N row changes as bench/stream.py writes them (transactions of 100-1000 rows, by
rows about 80 % INSERTs, 15 % UPDATEs, 5 % DELETEs on three 7-column tables), and
``single``, M one-row INSERT transactions (one row event per transaction: the reader's
per-event cost, not the row decoding, dominates). Each measurement is a fresh process
that runs the reader process's reading function (``_read(spec, buffer)``, as
``run_reader`` calls it) over one backlog, from its start to its end (``until``), into a
buffer that only counts; it reports rows/s, row events/s and its CPU seconds. With
several ``--code`` directories (checkouts of the repository, e.g. before and after a
change) the measurements alternate between them, K times per backlog; medians are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SERVER_ID = 6400


def _write_backlogs(server, rows: int, single: int) -> dict:
    """Create the tables, write both backlogs; their (start, end) positions."""
    sys.path.insert(0, str(REPO))
    from bench.stream import create_tables, generate_backlog
    from cdc_core.offset.position import master_position

    create_tables(server)
    mix = generate_backlog(server, rows, seed=11)
    conn = server.connect()
    with conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE bench.one (id BIGINT PRIMARY KEY, qty INT, note VARCHAR(32))")
        start = master_position(cur)
        rng = random.Random(5)
        for i in range(single):
            cur.execute("INSERT INTO bench.one VALUES (%s, %s, %s)", (i, rng.randint(0, 1000), f"n-{i}"))
        end = master_position(cur)
    return {"mix": (mix.start, mix.end, mix.changes), "single": (start, end, single)}


def _measure(args: argparse.Namespace) -> None:
    """One measurement (in a fresh process whose PYTHONPATH names the code measured)."""
    from cdc_core.binlog import reader
    from cdc_core.binlog.events import ReaderEnd, ReaderError, RowsEvent
    from cdc_core.offset.position import BinlogPosition
    from cdc_core.source.connection import ConnectionSettings

    class Counting:
        def __init__(self) -> None:
            self.rows = self.events = 0
            self.end = None

        def add(self, item, rows: int = 0, size: int = 0) -> None:
            if isinstance(item, RowsEvent):
                self.rows += len(item.rows)
                self.events += 1
            elif isinstance(item, ReaderEnd | ReaderError):
                self.end = item

    def position(text: str) -> BinlogPosition:
        file, pos = text.rsplit(":", 1)
        return BinlogPosition(file, int(pos))

    spec = reader.ReaderSpec(ConnectionSettings(host="127.0.0.1", port=args.port, user="root",
                                                password=args.password),
                             args.server_id, position(args.start), None, position(args.end), (r"bench\..*",), ())
    buffer = Counting()
    wall, cpu = time.perf_counter(), time.process_time()
    reader._read(spec, buffer)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if not isinstance(buffer.end, ReaderEnd):
        raise SystemExit(f"the reader did not reach the end: {buffer.end}")
    print(json.dumps({"rows": buffer.rows, "events": buffer.events, "seconds": wall, "cpu_s": cpu}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="row changes of the mixed backlog")
    ap.add_argument("--single", type=int, default=200_000, help="one-row transactions of the second backlog")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--code", action="append", help="a checkout to measure (default: this one)")
    ap.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    for name in ("port", "server-id"):
        ap.add_argument(f"--{name}", type=int, help=argparse.SUPPRESS)
    for name in ("password", "start", "end"):
        ap.add_argument(f"--{name}", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        _measure(args)
        return 0
    sys.path.insert(0, str(REPO))
    from devtools.local_mariadb import LocalMariaDB

    codes = [str(Path(c).resolve()) for c in (args.code or [REPO])]
    results: dict[tuple[str, str], list[dict]] = {}
    with LocalMariaDB() as server:
        t0 = time.perf_counter()
        backlogs = _write_backlogs(server, args.rows, args.single)
        print(f"backlogs written in {time.perf_counter() - t0:.0f} s: "
              + ", ".join(f"{k} {s}..{e} ({n:,} rows)" for k, (s, e, n) in backlogs.items()))
        for i in range(args.repeat):
            for name, (start, end, n) in backlogs.items():
                for code in codes:
                    out = subprocess.run(
                        [sys.executable, __file__, "--measure", "--port", str(server.port), "--password",
                         server.password, "--server-id", str(SERVER_ID + i), "--start", str(start), "--end", str(end)],
                        env={**os.environ, "PYTHONPATH": code}, capture_output=True, text=True, check=True)
                    r = json.loads(out.stdout.strip().splitlines()[-1])
                    if r["rows"] != n:
                        raise SystemExit(f"{code}: read {r['rows']} rows of {name}, the backlog has {n}")
                    results.setdefault((name, code), []).append(r)
                    print(f"  {name:6} {code}: {r['rows'] / r['seconds']:>10,.0f} rows/s "
                          f"{r['events'] / r['seconds']:>9,.0f} row events/s  cpu {r['cpu_s']:.1f} s")
    print("medians:")
    for (name, code), rs in results.items():
        rate = statistics.median(r["rows"] / r["seconds"] for r in rs)
        cpu_rate = statistics.median(r["rows"] / r["cpu_s"] for r in rs)
        print(f"  {name:6} {code}: {rate:,.0f} rows/s (wall), {cpu_rate:,.0f} rows per CPU second")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
