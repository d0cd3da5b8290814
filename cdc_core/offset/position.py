"""Binlog positions: totally ordered, comparable across file rotation and failover.

Invariants:
- ``a < b`` iff ``a`` comes earlier in the pipeline's binlog sequence: file number plus
  ``base`` first, then byte offset. ``seq()`` packs a position and a row index into one
  sortable int64 for the ``_cdc_seq`` column and the Delta transaction version.
- ``base`` is 0 until the pipeline fails over to another server. A failover chooses a
  base that puts every position of the new server after every position recorded on the
  old one (cdc_core/offset/failover.py), since a promoted replica numbers its binlog files on
  its own (another base name, fewer rotations). Every position read from a server
  carries the base of the position its reading started at, so one pipeline's positions
  stay one total order and its ``_cdc_seq`` keeps increasing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from cdc_core.source.flavour import flavour_of

_FILE_NUM = re.compile(r"\.(\d+)$")


@dataclass(frozen=True)
class BinlogPosition:
    """A point in the binlog: the end offset of an event (or a binlog end the server reported)."""

    file: str
    pos: int
    base: int = 0  # added to the file number: see the module invariants

    @cached_property  # compared on every event of the stream: parse the file name once
    def file_number(self) -> int:
        m = _FILE_NUM.search(self.file)
        if not m:
            raise ValueError(f"binlog file name without a sequence number: {self.file!r}")
        return int(m.group(1))

    @property
    def key(self) -> tuple[int, int]:
        """(file number + base, offset): the total order of positions."""
        return (self.file_number + self.base, self.pos)

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
        return ((self.file_number + self.base) << 44) | (self.pos << 12) | min(row_index, 4095)

    def at(self, file: str, pos: int) -> BinlogPosition:
        """Another position of the same server (read after this one): it carries this base."""
        p = BinlogPosition(file, pos, self.base)
        if file == self.file and "file_number" in self.__dict__:  # the same file: its number is parsed already
            p.__dict__["file_number"] = self.__dict__["file_number"]
        return p

    def at_base(self, base: int) -> BinlogPosition:
        """This position with another base (on a server binlake reads after a failover)."""
        return BinlogPosition(self.file, self.pos, base)

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}"

    def to_dict(self) -> dict:
        d = {"file": self.file, "pos": self.pos}
        if self.base:  # only after a failover: earlier offsets stay as they were written
            d["base"] = self.base
        return d

    @classmethod
    def from_dict(cls, d: dict) -> BinlogPosition:
        return cls(d["file"], int(d["pos"]), int(d.get("base") or 0))


def master_position(cursor, base: int = 0) -> BinlogPosition:
    """The server's current binlog end (SHOW BINARY LOG STATUS, SHOW MASTER STATUS before MySQL
    8.2 and on MariaDB: cdc_core/source/flavour.py), in a pipeline whose positions on this server
    carry ``base``."""
    statement = flavour_of(cursor).binlog_status_sql
    cursor.execute(statement)
    row = cursor.fetchone()
    if not row:
        raise RuntimeError(f"binary logging is off on the source ({statement} is empty): start it with --log-bin")
    return BinlogPosition(row[0], int(row[1]), base)
