"""The row changes of a table as ``mariadb-binlog --base64-output=decode-rows -v`` prints them
from the server's binlog files: an oracle independent of binlake's reader (python-mysql-replication,
its own row images, its event loop) for the history, soft-delete and change-feed tests.

Each change carries what binlake derives from the same event: the ``_cdc_seq`` of its row
(the event's file number and end position, the row's index in the event), its op, its image
(after for inserts and updates, before for deletes, columns by position), the key of the row
before and after, the event header's time (UTC seconds) and its transaction's GTID.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cdc_core.offset.position import BinlogPosition

_HEADER = re.compile(r"^#(\d{6}\s+\d{1,2}:\d{2}:\d{2}) server id \d+\s+end_log_pos (\d+)")
_GTID = re.compile(r"\bGTID (\d+-\d+-\d+)")
_ROW = re.compile(r"^### (INSERT INTO|UPDATE|DELETE FROM) `([^`]+)`\.`([^`]+)`")
_VALUE = re.compile(r"^###\s+@(\d+)=(.*)$")


@dataclass(frozen=True)
class Change:
    seq: int
    op: str  # c, u, d
    image: tuple  # after image (c, u) or before image (d), values by column position
    before_key: object | None  # the row's key before the change (u, d)
    after_key: object | None  # after it (c, u)
    ts: int  # the event header's time, seconds since the epoch (UTC)
    gtid: str | None


def _value(text: str):
    text = text.strip()
    if text == "NULL":
        return None
    if text.startswith("'"):
        return text[1:-1].replace("\\'", "'")
    text = text.split(" ", 1)[0]  # "-1 (4294967295)": the signed reading first
    return int(text) if re.fullmatch(r"-?\d+", text) else text


def table_changes(datadir: Path, start: BinlogPosition, database: str, table: str, key_index: int = 0
                  ) -> list[Change]:
    """The row changes of ``database.table`` after ``start``, in binlog order (the key: the
    column at ``key_index``)."""
    files = sorted(p for p in datadir.glob("binlog.[0-9]*"))
    files = [p for p in files if int(p.suffix[1:]) >= start.file_number]
    out: list[Change] = []
    for path in files:
        args = ["mariadb-binlog", "--base64-output=decode-rows", "-v", str(path)]
        if int(path.suffix[1:]) == start.file_number:
            args.insert(1, f"--start-position={start.pos}")
        text = subprocess.run(args, check=True, capture_output=True, text=True, env={**os.environ, "TZ": "UTC"}).stdout
        out += _parse(text, start.at(path.name, 0).file_number, database, table, key_index)
    return out


def _parse(text: str, file_number: int, database: str, table: str, key_index: int) -> list[Change]:
    out: list[Change] = []
    gtid = None
    end = ts = 0
    index = 0  # the row's index within its event
    row: dict | None = None

    def flush():
        nonlocal row
        if row is None:
            return
        op = row["op"]
        before, after = row.get("WHERE"), row.get("SET")
        image = after if op in ("c", "u") else before
        seq = BinlogPosition(f"binlog.{file_number:06d}", row["end"]).seq(row["index"])
        out.append(Change(seq, op, tuple(image[i] for i in sorted(image)),
                          before[key_index + 1] if before else None, after[key_index + 1] if after else None,
                          row["ts"], row["gtid"]))
        row = None

    part = None
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m:
            flush()
            ts = int(datetime.strptime(m.group(1).replace("  ", " "), "%y%m%d %H:%M:%S").replace(tzinfo=UTC)
                     .timestamp())
            end, index = int(m.group(2)), 0
            g = _GTID.search(line)
            if g:
                gtid = g.group(1)
            continue
        m = _ROW.match(line)
        if m:
            flush()
            if (m.group(2), m.group(3)) == (database, table):
                op = {"INSERT INTO": "c", "UPDATE": "u", "DELETE FROM": "d"}[m.group(1)]
                row = {"op": op, "end": end, "index": index, "ts": ts, "gtid": gtid}
            index += 1
            part = None
            continue
        if row is None:
            continue
        if line.startswith("### SET") or line.startswith("### WHERE"):
            part = line[4:].strip()
            row[part] = {}
            continue
        m = _VALUE.match(line)
        if m and part:
            row[part][int(m.group(1))] = _value(m.group(2))
    flush()
    return out
