"""Fold benchmark: the engine's CPU per row change to unpickle a batch's row events and fold them
(``TableBatch``: add_event, plan, the plan's Arrow rows), by event size and batch size.

    .venv/bin/python bench/fold.py [--repeat K] [--tree PATH ...]

One run starts a throwaway MariaDB (devtools.local_mariadb) and writes one table (bench/snapshot.py's
7 columns, every one decoded by binlake's own row-image readers and read as columns) in four parts,
each 2,048 row changes: single-row INSERTs, single-row UPDATEs (two columns changed), INSERTs of 128
rows a statement and UPDATEs of 128 rows a statement. Then, K times alternating over the trees given
(default: this checkout), a child process with that tree's code reads the range (``open_binlog``, the
stream reader's ``RowDecoder(packed=True)``), pickles each row event's rows as the reader process does,
and times, with the process's CPU clock, what the engine does with a batch of the first N changes of
each part (N = 16, 256, 2,048): unpickle each event, fold it into a fresh ``TableBatch``, plan it and
build the plan's Arrow rows. Reported: medians of CPU µs per row change, per tree, part and N.

Excludes: reading and decoding the binlog in the reader process, the queue (each event is pickled on
its own: the reader packs several into one message, so a kept decoder is pickled once a message),
hand-off filters, table modes, the Delta commit. CPU time, not wall time, so that other processes'
load counts little; the repeats alternate trees so that what remains hits both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import time

from checkouts import REPO, compare  # (bench/: the script's own folder, first on its path)

DB = "fold_bench"
COLUMNS = ("id BIGINT PRIMARY KEY, qty INT, name VARCHAR(32), price DECIMAL(12,2), created_at DATETIME, "
           "score DOUBLE, note VARCHAR(64)")
CHANGES = 2048  # row changes per part
STATEMENT_ROWS = 128  # rows per statement of the multi-row parts
BATCHES = (16, 256, 2048)  # changes per batch measured
PARTS = ("insert x1", "update x1", f"insert x{STATEMENT_ROWS}", f"update x{STATEMENT_ROWS}")


def _row(i: int) -> tuple:
    return (i, i % 1000, f"user-{i}", f"{i % 100000 / 100:.2f}", f"2020-01-01 00:00:{i % 60:02d}",
            None if i % 10 == 0 else i / 7, None if i % 7 == 0 else f"note {i:x}")


def load(server) -> tuple[dict, dict]:
    """Write the four parts; the binlog range around them."""
    from cdc_core.offset.position import master_position

    conn = server.connect()
    marks = ", ".join(["%s"] * 7)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {DB}")
        cur.execute(f"CREATE TABLE {DB}.t ({COLUMNS})")
        conn.commit()
        start = master_position(cur)
        for i in range(CHANGES):
            cur.execute(f"INSERT INTO {DB}.t VALUES ({marks})", _row(i))
            conn.commit()
        for i in range(CHANGES):
            cur.execute(f"UPDATE {DB}.t SET qty = qty + 1, note = 'changed' WHERE id = %s", (i,))
            conn.commit()
        for lo in range(CHANGES, 2 * CHANGES, STATEMENT_ROWS):
            cur.executemany(f"INSERT INTO {DB}.t VALUES ({marks})", [_row(i) for i in range(lo, lo + STATEMENT_ROWS)])
            conn.commit()
        for lo in range(CHANGES, 2 * CHANGES, STATEMENT_ROWS):
            cur.execute(f"UPDATE {DB}.t SET qty = qty + 1, note = 'changed' WHERE id >= %s AND id < %s",
                        (lo, lo + STATEMENT_ROWS))
            conn.commit()
        end = master_position(cur)
    conn.close()
    return {"file": start.file, "pos": start.pos}, {"file": end.file, "pos": end.pos}


def measure(port: int, password: str, start: dict, end: dict, repeat: int) -> dict:
    """In the child: CPU µs per change, per part and batch size."""
    from pymysqlreplication.event import XidEvent
    from pymysqlreplication.row_event import UpdateRowsEvent, WriteRowsEvent

    from cdc_core.batch.table_batch import TableBatch, plan_arrow
    from cdc_core.binlog.decoder import RowDecoder
    from cdc_core.binlog.event_source import open_binlog
    from cdc_core.offset.position import BinlogPosition
    from cdc_core.source.connection import ConnectionSettings

    conn = ConnectionSettings(host="127.0.0.1", port=port, user="root", password=password)
    lo, hi = BinlogPosition(start["file"], start["pos"]), BinlogPosition(end["file"], end["pos"])
    reader = open_binlog(conn, 7002, lo, only_events=[WriteRowsEvent, UpdateRowsEvent, XidEvent])
    decoder = RowDecoder(packed=True)
    events: list[tuple[str, int, bytes, BinlogPosition]] = []  # (op, rows, pickled rows, position)
    schema = None
    try:
        for event in reader:
            if isinstance(event, WriteRowsEvent | UpdateRowsEvent):
                d, _ = decoder.decoding(event)
                schema = d.layout.schema
                data = pickle.dumps(decoder.rows(event, d), pickle.HIGHEST_PROTOCOL)
                n = len(pickle.loads(data))  # noqa: S301 - our own bytes
                op = "c" if isinstance(event, WriteRowsEvent) else "u"
                events.append((op, n, data, BinlogPosition(reader.log_file, reader.log_pos)))
            if lo.at(reader.log_file, reader.log_pos) >= hi:
                break
    finally:
        reader.close()
    # the four parts, in binlog order, each CHANGES changes
    parts, changes, part = {name: [] for name in PARTS}, 0, 0
    for ev in events:
        parts[PARTS[part]].append(ev)
        changes += ev[1]
        if changes >= CHANGES * (part + 1):
            part += 1

    def fold(batch_events: list) -> float:
        t0 = time.process_time()
        batch = TableBatch(schema)
        for op, _, data, pos in batch_events:
            batch.add_event(op, pickle.loads(data), pos)  # noqa: S301 - our own bytes
        plan = batch.plan()
        for kind in ("append", "upsert", "delete"):
            if plan.has(kind):
                plan_arrow(schema, plan, kind)
        return time.process_time() - t0

    out = {}
    for name, evs in parts.items():
        for n in BATCHES:
            taken, count = [], 0
            for ev in evs:
                if count >= n:
                    break
                taken.append(ev)
                count += ev[1]
            times = [fold(taken) for _ in range(max(3, repeat * CHANGES // n))]
            out[f"{name}|{n}"] = statistics.median(times) / count * 1e6
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)

    def loaded(server, _args) -> dict:
        start, end = load(server)
        return {"start": start, "end": end, "repeat": 1}

    args, results = compare(p, __file__, loaded, measure,
                            lambda k, tree, _: print(f"run {k + 1} {tree} done", flush=True))
    print(f"\nCPU µs per row change, medians over {args.repeat} runs (load {os.getloadavg()[0]:.2f})")
    print(f"  {'tree':40s} {'part':12s} " + "".join(f"{f'batch {n:,}':>13s}" for n in BATCHES))
    figures = {}
    for tree, runs in results.items():
        for name in PARTS:
            cells = [statistics.median(r[f"{name}|{n}"] for r in runs) for n in BATCHES]
            figures[f"{tree}|{name}"] = cells
            print(f"  {tree[-40:]:40s} {name:12s} " + "".join(f"{c:13.1f}" for c in cells))
    out = REPO / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "fold.json").write_text(json.dumps(figures, indent=1))
    print(f"  figures written to {out / 'fold.json'}")


if __name__ == "__main__":
    main()
