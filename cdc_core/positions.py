"""Binlog positions: totally ordered, comparable across file rotation.

Invariant: ``a < b`` iff ``a`` comes earlier in the server's binlog sequence
(file number first, then byte offset). ``seq()`` packs a position and a row
index into one sortable int64 for the ``_cdc_seq`` column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

_FILE_NUM = re.compile(r"\.(\d+)$")


@dataclass(frozen=True)
class BinlogPosition:
    """A point in the binlog: the end offset of an event (or a SHOW MASTER STATUS position)."""

    file: str
    pos: int

    @cached_property  # compared on every event of the stream: parse the file name once
    def file_number(self) -> int:
        m = _FILE_NUM.search(self.file)
        if not m:
            raise ValueError(f"binlog file name without a sequence number: {self.file!r}")
        return int(m.group(1))

    @property
    def key(self) -> tuple[int, int]:
        """(file number, offset): the total order of positions."""
        return (self.file_number, self.pos)

    def __lt__(self, other: BinlogPosition) -> bool:
        return self.key < other.key

    def __le__(self, other: BinlogPosition) -> bool:
        return self.key <= other.key

    def __gt__(self, other: BinlogPosition) -> bool:
        return self.key > other.key

    def __ge__(self, other: BinlogPosition) -> bool:
        return self.key >= other.key

    def seq(self, row_index: int = 0) -> int:
        """Sortable int64: 19 bits of file number, 32 of offset, 12 of row index."""
        return (self.file_number << 44) | (self.pos << 12) | min(row_index, 4095)

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}"

    def to_dict(self) -> dict:
        return {"file": self.file, "pos": self.pos}

    @classmethod
    def from_dict(cls, d: dict) -> BinlogPosition:
        return cls(d["file"], int(d["pos"]))


def master_position(cursor) -> BinlogPosition:
    """The server's current binlog end (SHOW MASTER STATUS)."""
    cursor.execute("SHOW MASTER STATUS")
    row = cursor.fetchone()
    if not row:
        raise RuntimeError("binary logging is off on the source (SHOW MASTER STATUS is empty): start it with --log-bin")
    return BinlogPosition(row[0], int(row[1]))
