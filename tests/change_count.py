"""Test oracle: no binlog change applied twice, none lost, proved by counting.

A final Delta = MySQL comparison cannot see a replayed batch (re-applying full after-images
is idempotent). This oracle counts instead, per captured table and op:

- the binlog's side: the row changes of the binlog range from the stream's start to its end
  position, read by ``mariadb-binlog`` (the server's own client, not binlake's reader): each
  decoded row (``### INSERT INTO``, ``### UPDATE``, ``### DELETE FROM``) is one change;
- binlake's side: the changes every stream commit of the table covers, as the commit records
  them (``binlake.stream.changes``, docs/contracts.md), summed over every commit of every run.

The stream starts at the lowest low watermark of the snapshot's chunks (pipelines/stream/start.py)
and ends, after the final run, at the checkpoint's applied position. A batch applied twice after
a crash adds its changes a second time (the sum is larger); a batch lost leaves them out (smaller).
A commit records only its end (its offset): the count is what proves that successive commits'
ranges neither overlap nor leave a gap.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections import Counter

from deltalake import DeltaTable

from cdc_core.config import BinlakeConfig
from cdc_core.offset.position import BinlogPosition
from cdc_core.offset.stream_offset import OFFSET_KEY, StreamOffset
from cdc_core.routes import Router
from cdc_core.source.connection import ConnectionSettings, connect, connection_settings
from pipelines.lake.control_store import ControlStore
from pipelines.lake.offsets import CHANGES_KEY
from pipelines.lake.tables import open_table, table_uri

OPS = ("c", "u", "d")
_ROW = re.compile(r"^### (INSERT INTO|UPDATE|DELETE FROM) `((?:[^`]|``)+)`\.`((?:[^`]|``)+)`$")
_OP = {"INSERT INTO": "c", "UPDATE": "u", "DELETE FROM": "d"}


def _zero() -> Counter:
    return Counter(dict.fromkeys(OPS, 0))


def binlog_changes(settings: ConnectionSettings, start: BinlogPosition, end: BinlogPosition,
                   tables: set[str]) -> dict[str, Counter]:
    """Row changes per op of each of ``tables`` ("db.t") in the binlog events after ``start``
    up to ``end`` (both event end positions of one server, at transaction boundaries), as
    ``mariadb-binlog`` decodes them from the server."""
    with connect(settings) as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = [r[0] for r in cur.fetchall()
                 if start.file_number <= BinlogPosition(r[0], 4).file_number <= end.file_number]
    assert files and files[0] == start.file and files[-1] == end.file, (
        f"the server no longer holds the binlog from {start} to {end}: {files}")
    binary = shutil.which("mariadb-binlog") or shutil.which("mysqlbinlog")
    assert binary, "the oracle needs mariadb-binlog (or mysqlbinlog)"
    # --start-position applies to the first file named, --stop-position (the first event
    # starting at or after it is left out) to the last; -v decodes every row on its own line.
    cmd = [binary, "--read-from-remote-server", f"--host={settings.host}", f"--port={settings.port}",
           f"--user={settings.user}", f"--start-position={start.pos}", f"--stop-position={end.pos}",
           "--base64-output=DECODE-ROWS", "-v", *files]
    counts = {t: _zero() for t in tables}
    # The password through the environment: never on a command line other processes can list.
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                          env={**os.environ, "MYSQL_PWD": settings.password}) as proc:
        for line in proc.stdout:
            if not line.startswith("### "):
                continue
            m = _ROW.match(line.rstrip("\n"))
            if m:
                table = f"{m[2].replace('``', '`')}.{m[3].replace('``', '`')}"
                if table in counts:
                    counts[table][_OP[m[1]]] += 1
        err = proc.stderr.read()
    assert proc.returncode == 0, f"{binary} failed ({proc.returncode}): {err}"
    return counts


def stream_start(cfg: BinlakeConfig, names: list[str]) -> BinlogPosition:
    """Where the stream of a snapshotted pipeline first started: the lowest low watermark of
    the completed chunks of ``names`` (every captured table)."""
    store, router = ControlStore.of(cfg), Router(cfg.routes)
    lows = [r.low_watermark for n in names
            for r in store.completed_chunks(n, open_table(table_uri(cfg.sink.path, router.sink(n)),
                                                          cfg.sink.storage_options)).values()]
    assert lows, f"no completed snapshot chunk of {names}"
    return min(lows)


def committed_changes(cfg: BinlakeConfig, name: str) -> tuple[Counter, list[BinlogPosition]]:
    """The changes of source table ``name`` that its Delta table's stream commits record,
    summed over every commit, and each stream commit's applied position (oldest first)."""
    dt = DeltaTable(table_uri(cfg.sink.path, Router(cfg.routes).sink(name)),
                    storage_options=cfg.sink.storage_options or None)
    total, ends = _zero(), []
    for commit in sorted(dt.history(), key=lambda c: c["version"]):
        if not commit.get(OFFSET_KEY):
            continue  # a snapshot commit, a table created, rows deleted by hand
        ends.append(StreamOffset.from_json(commit[OFFSET_KEY]).applied)
        raw = commit.get(CHANGES_KEY)
        changes = (json.loads(raw) if isinstance(raw, str) else raw) if raw else {}
        total.update(changes.get(name, {}))
    return total, ends


def assert_changes_counted(cfg: BinlakeConfig, names: list[str], start: BinlogPosition | None = None,
                           end: BinlogPosition | None = None) -> dict[str, dict[str, int]]:
    """For each captured table of ``names``: the changes its stream commits record, summed
    over all of them, equal the binlog's changes from ``start`` (default: the snapshot's
    lowest low watermark) to ``end`` (default: the checkpoint's applied position, the end
    of a final run), and every commit's offset is in that range. Returns the binlog's counts."""
    if start is None:
        start = stream_start(cfg, names)
    if end is None:
        cp = ControlStore.of(cfg).checkpoint()
        assert cp is not None, "no stream checkpoint"
        end = cp.offset.applied
    binlog = binlog_changes(connection_settings(cfg), start, end, set(names))
    problems = []
    for n in names:
        committed, ends = committed_changes(cfg, n)
        outside = [str(p) for p in ends if not start < p <= end]
        if outside:
            problems.append(f"{n}: commits applied through {outside}, outside the range ({start}, {end}]")
        want = binlog[n]
        wrong = [f"{op} {committed[op]} committed, {want[op]} in the binlog "
                 f"({'changes applied twice' if committed[op] > want[op] else 'changes lost'})"
                 for op in OPS if committed[op] != want[op]]
        if wrong:
            problems.append(f"{n}: {'; '.join(wrong)} ({start} to {end}, {len(ends)} stream commits)")
    assert not problems, "\n".join(problems)
    return {n: dict(binlog[n]) for n in names}
