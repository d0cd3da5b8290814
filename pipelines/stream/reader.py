"""The reader process as the engine sees it: start it at a position, take its records,
stop it.

Invariants (tests/test_stream_crash.py, tests/test_stream_signals.py):
- At most one reader process runs per engine; ``start`` stops the previous one first,
  so a reconnect never has two readers on one server_id.
- The reader process never ends by SIGTERM/SIGINT: a supervisor or Ctrl-C signals the
  whole process group, and the engine alone decides to stop (it commits what it read,
  then ends the reader). It ignores both from the instant it is forked.
- A reader that exits without an end or an error record (killed, crashed) is reported
  as a transient ``ReaderError``.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import queue as queue_mod
import signal

from cdc_core.events import ReaderError, ReaderRecord, ReadFailure
from cdc_core.positions import BinlogPosition
from cdc_core.stream_reader import QUEUE_ITEMS, STOP_SIGNALS, ReaderSpec, run_reader


class ReaderProcess:
    """One binlog reader process at a time, feeding a bounded queue."""

    def __init__(self, spec: ReaderSpec):
        self.spec = spec  # start/skip_through are replaced on each start
        self.process: multiprocessing.Process | None = None
        self._queue = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self, start: BinlogPosition, skip_through: BinlogPosition | None) -> None:
        """(Re)start reading at ``start`` (a transaction boundary), skipping row events at
        or before ``skip_through``."""
        self.stop()
        # fork, not spawn: spawn re-imports the caller's __main__ (a script, Dagster, pytest),
        # and the reader needs nothing the parent's threads could hold (it only opens sockets).
        ctx = multiprocessing.get_context("fork")
        self._queue = ctx.Queue(maxsize=QUEUE_ITEMS)
        spec = dataclasses.replace(self.spec, start=start, skip_through=skip_through)
        self.process = ctx.Process(target=run_reader, args=(spec, self._queue, os.getpid()), name="binlake-reader",
                                   daemon=True)
        # Stop signals stay blocked across the fork: the child starts with them blocked and ignores
        # them before unblocking (run_reader), so a group signal landing in between cannot end it.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            self.process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def take(self, timeout: float) -> list[ReaderRecord]:
        """The next records (a list, in binlog order), or [] if none came within ``timeout``."""
        try:
            return self._queue.get(timeout=timeout)
        except queue_mod.Empty:
            if self.process.is_alive():
                return []
            return [ReaderError(ReadFailure.TRANSIENT, f"reader process exited with code {self.process.exitcode}")]

    def stop(self) -> None:
        if self.process is None:
            return
        # SIGKILL, as the reader ignores SIGTERM; it has nothing to flush (its queue is dropped
        # here, and the server ends the replication connection when its socket closes).
        self.process.kill()
        self.process.join()
        self._queue.close()
        self._queue.cancel_join_thread()
        self.process = None
