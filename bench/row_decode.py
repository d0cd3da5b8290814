"""Row-decoding benchmark: rows/s of ``RowDecoder`` (cdc_core/binlog/decoder.py) over a backlog of
row events, and of the per-value canonical conversion after it (``types.mapping.binlog_value``).

    .venv/bin/python bench/row_decode.py [--rows N] [--repeat K] [--tree PATH ...]

One run starts a throwaway MariaDB (devtools.local_mariadb) and writes two tables in
transactions of 1,000 rows: ``fast`` (BIGINT PK, INT, VARCHAR(32), DECIMAL(12,2), DATETIME,
DOUBLE, VARCHAR(64), as bench/snapshot.py: every column has binlake's own row-image reader)
and ``library`` (INT PK, TIME(3), SET, BIT(5), TIMESTAMP(6), YEAR: columns the library
decodes, with binlake's corrections), N rows each, inserted then updated. Then, K times
alternating over the trees given (default: this checkout), a child process with that tree's code reads the range
with ``open_binlog`` and times, per table, only the decoding of its row events
(``RowDecoder.decoding`` + ``RowDecoder.rows``, the thread's CPU time around them), and separately
``binlog_value`` over every value decoded. Reading the events from the server is outside the
clock. Reported: medians of rows per CPU second, per tree and table (an update counts as one row).

Excludes: the reader process, the queue, batching and Delta; only one machine's figures.
CPU time rather than wall time, so that other processes' load counts little (caches and
clock frequency still vary); the repeats alternate trees so that what remains hits both alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from checkouts import compare  # (bench/: the script's own folder, first on its path)

DB = "decode_bench"
TABLES = {
    "fast": ("id BIGINT PRIMARY KEY, qty INT, name VARCHAR(32), price DECIMAL(12,2), created_at DATETIME, "
             "score DOUBLE, note VARCHAR(64)"),
    "library": "id INT PRIMARY KEY, t TIME(3), s SET('a','b','c','d'), b BIT(5), ts TIMESTAMP(6) NULL, y YEAR",
}
TX_ROWS = 1000


def _values(table: str, i: int) -> tuple:
    if table == "fast":
        return (i, i % 100000, f"user-{i}", f"{(i % 10_000_000) / 100:.2f}", f"2020-01-01 00:00:{i % 60:02d}",
                None if i % 10 == 0 else i / 7, None if i % 7 == 0 else f"note {i:x}" * 3)
    return (i, f"{'-' if i % 3 == 0 else ''}{i % 800}:{i % 60:02d}:{i % 60:02d}.{i % 1000:03d}",
            ",".join("abcd"[k] for k in range(4) if i >> k & 1), i % 32, f"2021-02-03 04:05:{i % 60:02d}.{i:06d}"[:26],
            1901 + i % 250)


def load(server, rows: int) -> tuple[dict, dict]:
    """Write the backlog; the (start, end) binlog positions around it."""
    from cdc_core.offset.position import master_position

    conn = server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {DB}")
        for table, ddl in TABLES.items():
            cur.execute(f"CREATE TABLE {DB}.{table} ({ddl})")
        conn.commit()
        start = master_position(cur)
        for table in TABLES:
            marks = ", ".join(["%s"] * len(_values(table, 0)))
            for lo in range(0, rows, TX_ROWS):
                cur.executemany(f"INSERT INTO {DB}.{table} VALUES ({marks})",
                                [_values(table, i) for i in range(lo, min(lo + TX_ROWS, rows))])
                conn.commit()
            change = "y = IF(y = 2155, 1901, y + 1)" if table == "library" else "qty = qty + 1"
            for lo in range(0, rows, TX_ROWS):
                cur.execute(f"UPDATE {DB}.{table} SET {change} WHERE id >= %s AND id < %s", (lo, lo + TX_ROWS))
                conn.commit()
        end = master_position(cur)
    conn.close()
    return {"file": start.file, "pos": start.pos}, {"file": end.file, "pos": end.pos}


def measure(port: int, password: str, start: dict, end: dict) -> dict:
    """In the child: seconds spent decoding and converting, and rows, per table."""
    from pymysqlreplication.event import RotateEvent, XidEvent

    from cdc_core.binlog.decoder import ROW_EVENTS, RowDecoder
    from cdc_core.binlog.event_source import open_binlog
    from cdc_core.offset.position import BinlogPosition
    from cdc_core.source.connection import ConnectionSettings
    from cdc_core.types.mapping import binlog_value

    conn = ConnectionSettings(host="127.0.0.1", port=port, user="root", password=password)
    lo, hi = BinlogPosition(start["file"], start["pos"]), BinlogPosition(end["file"], end["pos"])
    # the XID too: the range ends at a commit, and the reader blocks at the binlog's end
    reader = open_binlog(conn, 7001, lo, only_events=[*ROW_EVENTS, RotateEvent, XidEvent])
    decoder = RowDecoder()
    out = {t: {"rows": 0, "decode_s": 0.0, "convert_s": 0.0} for t in TABLES}
    clock = time.thread_time  # CPU time of this thread: what decoding costs, whatever else the machine runs
    try:
        for event in reader:
            if isinstance(event, ROW_EVENTS):
                t0 = clock()
                d, _ = decoder.decoding(event)
                rows = decoder.rows(event, d)
                t1 = clock()
                cols = d.layout.schema.columns
                images = [img for r in rows for img in (r if isinstance(r, tuple) and isinstance(r[0], tuple)
                                                         else (r,))]
                t2 = clock()
                for img in images:
                    for c, v in zip(cols, img):
                        binlog_value(c, v)
                t3 = clock()
                s = out[event.table]
                s["rows"] += len(rows)
                s["decode_s"] += t1 - t0
                s["convert_s"] += t3 - t2
            if lo.at(reader.log_file, reader.log_pos) >= hi:
                break
    finally:
        reader.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=100_000, help="rows per table")
    p.add_argument("--repeat", type=int, default=5)

    def loaded(server, args) -> dict:
        start, end = load(server, args.rows)
        return {"start": start, "end": end}

    def report(k: int, tree, result: dict) -> None:
        print(f"run {k + 1} {tree}: " + ", ".join(
            f"{t} {s['rows'] / s['decode_s']:,.0f} rows/CPU s decode, {s['rows'] / s['convert_s']:,.0f} "
            "rows/CPU s binlog_value" for t, s in result.items()), flush=True)

    args, results = compare(p, __file__, loaded, measure, report)
    print(f"\nmedians over {args.repeat} runs ({2 * args.rows:,} row changes per table; load {os.getloadavg()[0]:.2f})")
    for tree, runs in results.items():
        for t in TABLES:
            dec = statistics.median(r[t]["rows"] / r[t]["decode_s"] for r in runs)
            conv = statistics.median(r[t]["rows"] / r[t]["convert_s"] for r in runs)
            print(f"  {tree}  {t:8s} decode {dec:>10,.0f} rows/CPU s   binlog_value {conv:>10,.0f} rows/CPU s")


if __name__ == "__main__":
    main()
