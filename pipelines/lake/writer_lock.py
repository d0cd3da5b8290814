"""One writer per pipeline: the lock that ``binlake snapshot``, ``stream`` and ``run`` hold
while they write a pipeline's lake.

Two kinds behind one interface (:class:`WriterLock`: ``acquire`` / ``renew`` / ``release``,
and ``holder`` to look without taking anything):

- :class:`FileLock`, for a lake on a local (or mounted) file system: ``fcntl.flock`` on
  ``<sink.path>/_binlake/writer/<pipeline>.lock``. The kernel drops the lock the instant its
  holder dies (SIGKILL included), so a restart right after a crash proceeds at once. The file
  also holds the holder's record (host, pid, command, since when) for the refusal message.
- :class:`LeaseLock`, for an object store, where no OS lock exists: a lease with an expiry in
  a one-row Delta table ``<sink.path>/_binlake/writer/<pipeline>``. Every acquisition,
  renewal and release is a Delta commit made at exactly the version after the one read
  (``max_commit_retries=0``): if another process committed in between, ours fails, so two
  processes can never both believe they hold it (delta-rs writes a version with put-if-absent:
  atomic on a local disk, and on S3 with conditional put). The holder renews every
  ``ttl / 3``; a holder that cannot renew before its lease runs out, or finds the lease taken
  over, ends its process at once (:meth:`LeaseLock.on_lost`), which binlake survives like any
  crash (nothing half-committed, resumed on restart). A lease left by a killed holder blocks a
  restart until it expires (``ttl``, 60 s by default), unless it was a process of the same
  host that is gone (checked by pid), which frees it at once. Expiry compares wall clocks of
  different hosts: keep them in sync (NTP) to well under the ttl.

Invariants (tests/test_writer_lock.py):
- while one process holds a pipeline's lock, every other ``acquire`` fails at once with
  :class:`WriterLockHeld` naming the holder;
- a file lock is free the moment its holder dies; a lease is free once expired or released;
- ``holder()`` never takes, renews or blocks the lock (``binlake status`` uses it);
- a lease commit the store made but whose answer was lost (delta-rs finds the version
  taken by its own put and refuses to commit again) is recognised as ours by its token and
  expiry, never taken for another holder's (tests/test_lake_faults.py);
- an acquisition that loses its commit to a write leaving the lease free by its clock (a
  release, or a renewal already over for a host whose clock runs ahead) takes it at the next
  version; one that loses to a live lease is :class:`WriterLockHeld`.

The kind is chosen by the sink path (a URI with a scheme other than ``file`` → lease); the
environment variable ``BINLAKE_WRITER_LOCK`` (``file`` | ``lease``) forces one, and
``BINLAKE_LEASE_SECONDS`` sets the lease's ttl.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

log = logging.getLogger(__name__)

LOCK_ENV = "BINLAKE_WRITER_LOCK"
LEASE_SECONDS_ENV = "BINLAKE_LEASE_SECONDS"
DEFAULT_LEASE_SECONDS = 60.0
_LEASE_CHECKPOINT_EVERY = 100  # commits between Delta checkpoints of the lease table (keeps reads short)

Clock = Callable[[], dt.datetime]


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True)
class Holder:
    """Who holds (or last held) a pipeline's writer lock."""

    host: str
    pid: int
    command: str
    since: dt.datetime  # when it acquired the lock (UTC)
    token: str  # unique per acquisition
    expires: dt.datetime | None = None  # lease only: when the lease runs out unless renewed

    @classmethod
    def mine(cls, command: str, now: dt.datetime) -> Holder:
        return cls(socket.gethostname(), os.getpid(), command, now, uuid.uuid4().hex)

    def describe(self) -> str:
        text = f"host {self.host}, pid {self.pid}, `{self.command}`, since {self.since:%Y-%m-%d %H:%M:%S} UTC"
        if self.expires is not None:
            text += f", lease valid until {self.expires:%H:%M:%S} UTC"
        return text

    def to_json(self) -> str:
        d = asdict(self)
        d["since"] = self.since.isoformat()
        d["expires"] = self.expires.isoformat() if self.expires else None
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str) -> Holder:
        d = json.loads(text)
        d["since"] = dt.datetime.fromisoformat(d["since"])
        d["expires"] = dt.datetime.fromisoformat(d["expires"]) if d.get("expires") else None
        return cls(**d)


class WriterLockError(RuntimeError):
    """The writer lock cannot be taken (bad input: exit 2)."""


class WriterLockHeld(WriterLockError):
    """Another process holds the pipeline's writer lock."""

    def __init__(self, pipeline: str, holder: Holder | None):
        self.pipeline, self.holder = pipeline, holder
        who = holder.describe() if holder else "a process that has not recorded itself yet"
        super().__init__(f"pipeline {pipeline!r} is already being written by another binlake process ({who}); "
                         "only one snapshot, stream or run may write a pipeline at a time: stop that one first")


class LakeNotWritable(WriterLockError):
    """The lock cannot even be created: the sink path is not writable."""


class WriterLock(ABC):
    """A pipeline's writer lock (see the module docstring)."""

    def __init__(self, pipeline: str, command: str):
        self.pipeline = pipeline
        self.command = command
        self.held: Holder | None = None

    @abstractmethod
    def acquire(self) -> Holder:
        """Take the lock or raise :class:`WriterLockHeld` at once (never waits)."""

    @abstractmethod
    def renew(self) -> None:
        """Extend the hold (a lease's expiry; nothing for a file lock)."""

    @abstractmethod
    def release(self) -> None:
        """Let the lock go (idempotent)."""

    @abstractmethod
    def holder(self) -> Holder | None:
        """The current holder, read without taking anything; None when the lock is free."""

    def __enter__(self) -> WriterLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def lock_name(pipeline: str) -> str:
    """A file/object name for a pipeline name (any text): kept when plain, else made plain and suffixed
    with a digest so distinct names never share a lock."""
    if re.fullmatch(r"[A-Za-z0-9_.-]+", pipeline) and pipeline not in (".", ".."):
        return pipeline
    plain = re.sub(r"[^A-Za-z0-9_-]", "_", pipeline)[:64]
    return f"{plain}-{hashlib.sha256(pipeline.encode()).hexdigest()[:12]}"


def _lock_root(sink_path: str) -> str:
    return f"{sink_path.rstrip('/')}/_binlake/writer"


def is_local(sink_path: str) -> bool:
    """Whether the sink path is on a file system (a plain path or a ``file://`` URI)."""
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", sink_path)
    return scheme is None or scheme.group(1).lower() == "file"


def _local_path(sink_path: str) -> Path:
    return Path(sink_path[len("file://"):] if sink_path.lower().startswith("file://") else sink_path)


# --- local lake: an OS lock -------------------------------------------------------------------


class FileLock(WriterLock):
    """``fcntl.flock`` on ``<sink>/_binlake/writer/<pipeline>.lock``; the file holds the holder's record."""

    _open_fds: set[int] = set()  # lock fds of this process, closed in forked children (see below)

    def __init__(self, sink_path: str, pipeline: str, command: str, clock: Clock = _utcnow):
        super().__init__(pipeline, command)
        self.path = _local_path(_lock_root(sink_path)) / f"{lock_name(pipeline)}.lock"
        self.clock = clock
        self._fd: int | None = None

    def acquire(self) -> Holder:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise LakeNotWritable(f"sink.path: cannot create the writer lock {self.path}: "
                                  f"{e.strerror or e} (the lake must be writable)") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise WriterLockHeld(self.pipeline, self._read_record(wait=True)) from None
        holder = Holder.mine(self.command, self.clock())
        data = holder.to_json().encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        self._fd, self.held = fd, holder
        FileLock._open_fds.add(fd)
        return holder

    def renew(self) -> None:
        """Nothing to do: the kernel holds the lock for as long as the process lives."""

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd, self.held = self._fd, None, None
        FileLock._open_fds.discard(fd)
        try:
            os.ftruncate(fd, 0)  # no stale record for `status` to show
        finally:
            os.close(fd)  # closing the last descriptor drops the flock

    def holder(self) -> Holder | None:
        record = self._read_record(wait=False)
        return None if record is not None and _gone(record) else record

    def _read_record(self, wait: bool) -> Holder | None:
        # A holder writes its record right after taking the lock: a refused process may read the
        # file in that instant, so it looks again for a moment before giving up on a name.
        deadline = time.monotonic() + (1.0 if wait else 0.0)
        while True:
            try:
                text = self.path.read_text()
                if text.strip():
                    return Holder.from_json(text)
            except (OSError, ValueError, TypeError, KeyError):
                pass
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)


def _close_lock_fds_in_child() -> None:
    # A forked child (the stream's binlog reader) shares the parent's open lock file: it would keep
    # the flock alive after a SIGKILLed parent until the child exits too. Closing the child's copy
    # leaves the parent's lock as it is (flock locks belong to the open file, not the descriptor;
    # only an explicit LOCK_UN, never done here, would drop it).
    for fd in list(FileLock._open_fds):
        try:
            os.close(fd)
        except OSError:
            pass
    FileLock._open_fds.clear()


os.register_at_fork(after_in_child=_close_lock_fds_in_child)


# --- object store: a lease in a Delta table ----------------------------------------------------

LEASE_SCHEMA = pa.schema([
    ("pipeline", pa.string()), ("host", pa.string()), ("pid", pa.int64()), ("command", pa.string()),
    ("since", pa.timestamp("us", tz="UTC")), ("token", pa.string()), ("expires", pa.timestamp("us", tz="UTC")),
    ("released", pa.bool_()),
])


# One attempt, no conflict resolution: the commit lands at exactly the version after the one read,
# or fails (CommitFailedError) because another process wrote that version first.
_ONE_ATTEMPT = CommitProperties(max_commit_retries=0)
# Takes of a free lease that lose the commit to a write leaving it free (by the taker's clock).
_ACQUIRE_ATTEMPTS = 5


def _version(table: DeltaTable | None) -> int:
    return -1 if table is None else table.version()


def _gone(holder: Holder) -> bool:
    """Whether ``holder`` was a process of this host that no longer runs (killed): its lock is
    free. Another host's process cannot be checked from here."""
    if holder.host != socket.gethostname():
        return False
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, another user's
    return False


class LeaseLost(RuntimeError):
    """This process's lease expired or was taken over: it must stop writing at once."""


class LeaseLock(WriterLock):
    """A lease in the one-row Delta table ``<sink>/_binlake/writer/<pipeline>`` (see the module docstring)."""

    def __init__(self, sink_path: str, pipeline: str, command: str, *, ttl: float = DEFAULT_LEASE_SECONDS,
                 storage_options: dict | None = None, clock: Clock = _utcnow,
                 on_lost: Callable[[str], None] | None = None, renew_in_background: bool = True):
        super().__init__(pipeline, command)
        self.uri = f"{_lock_root(sink_path)}/{lock_name(pipeline)}"
        self.ttl = dt.timedelta(seconds=ttl)
        self.storage_options = storage_options or None
        self.clock = clock
        self.on_lost = on_lost or _exit_now
        self.renew_in_background = renew_in_background
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    # reading ----------------------------------------------------------------------------------

    def _table(self) -> DeltaTable | None:
        try:
            return DeltaTable(self.uri, storage_options=self.storage_options)
        except TableNotFoundError:
            return None

    def _live(self, holder: Holder | None) -> Holder | None:
        """``holder`` while its lease binds: not expired, and not left by a dead process of this host."""
        if holder is None or holder.expires <= self.clock() or _gone(holder):
            return None
        return holder

    @staticmethod
    def _current(table: DeltaTable | None) -> Holder | None:
        """The lease row of ``table`` as a holder, None when it was released (or never taken)."""
        if table is None:
            return None
        rows = table.to_pyarrow_table().to_pylist()
        if not rows or rows[-1]["released"]:
            return None
        r = rows[-1]
        return Holder(r["host"], r["pid"], r["command"], r["since"], r["token"], r["expires"])

    def holder(self) -> Holder | None:
        return self._live(self._current(self._table()))

    # writing ----------------------------------------------------------------------------------

    def _commit(self, table: DeltaTable | None, holder: Holder, released: bool = False) -> None:
        """Write ``holder`` as the lease at exactly the version after ``table``'s (CommitFailedError otherwise)."""
        row = {**asdict(holder), "pipeline": self.pipeline, "released": released}
        data = pa.Table.from_pylist([row], schema=LEASE_SCHEMA)
        if table is None:
            # Version 0 is written with put-if-absent too: of two creators, one fails.
            write_deltalake(self.uri, data, mode="error", storage_options=self.storage_options,
                            commit_properties=_ONE_ATTEMPT)
            return
        write_deltalake(table, data, mode="overwrite", commit_properties=_ONE_ATTEMPT)  # leaves table at its commit
        if table.version() % _LEASE_CHECKPOINT_EVERY == 0:
            table.create_checkpoint()
            table.cleanup_metadata()

    def acquire(self) -> Holder:
        for _ in range(_ACQUIRE_ATTEMPTS):
            table = self._table()
            current = self._live(self._current(table))
            now = self.clock()
            if current is not None:
                raise WriterLockHeld(self.pipeline, current)
            mine = replace(Holder.mine(self.command, now), expires=now + self.ttl)
            try:
                self._commit(table, mine)
                break
            except Exception as e:  # noqa: BLE001 - lost the race, or the lake is not writable: tell which
                after = self._table()
                other = self._live(self._current(after))
                # Ours: the store made the commit but its answer was lost (delta-rs, putting it again,
                # found the version taken by it); else someone committed between our read and our write.
                if other is not None and other.token == mine.token:
                    break
                if other is not None:
                    raise WriterLockHeld(self.pipeline, other) from None
                if _version(after) == _version(table):
                    raise LakeNotWritable(f"sink.path: cannot write the writer lease {self.uri}: "
                                          f"{type(e).__name__}: {e}") from None
                # Someone wrote a lease that is already over by our clock (a release, a renewal
                # that ran out): the lock is free, take it at the new version.
        else:
            raise LakeNotWritable(f"sink.path: the writer lease {self.uri} changed under each of "
                                  f"{_ACQUIRE_ATTEMPTS} attempts to take it")
        self.held = mine
        if self.renew_in_background:
            self._stop.clear()
            self._renewer = threading.Thread(target=self._keep_renewing, name="binlake-lease", daemon=True)
            self._renewer.start()
        return mine

    def renew(self) -> None:
        """Extend the lease by ``ttl`` from now; :class:`LeaseLost` when it is no longer ours."""
        if self.held is None:
            raise LeaseLost(f"pipeline {self.pipeline!r}: no lease held")
        table = self._table()
        current = self._current(table)
        now = self.clock()
        if current is None or current.token != self.held.token:
            raise LeaseLost(f"pipeline {self.pipeline!r}: the writer lease was taken over by "
                            f"{current.describe() if current else 'nobody (released)'}")
        if current.expires <= now:
            raise LeaseLost(f"pipeline {self.pipeline!r}: the writer lease expired at {current.expires:%H:%M:%S} UTC "
                            "before it could be renewed")
        renewed = replace(self.held, expires=now + self.ttl)
        try:
            self._commit(table, renewed)
        except Exception as e:
            # Our own renewal if its answer was lost (delta-rs, putting it again, found the version
            # taken by it; or gave up on a broken connection): the lease reads as renewed.
            if self._current(self._table()) != renewed:
                if isinstance(e, CommitFailedError):
                    raise LeaseLost(f"pipeline {self.pipeline!r}: another process wrote the writer lease ({e})") \
                        from None
                raise  # the background renewer tries again until the lease would expire
        self.held = renewed

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None and self._renewer is not threading.current_thread():
            self._renewer.join(10)
        self._renewer = None
        if self.held is None:
            return
        held, self.held = self.held, None
        table = self._table()
        current = self._current(table)
        if current is None or current.token != held.token:
            return  # not ours any more: nothing to release
        try:
            self._commit(table, replace(held, expires=self.clock()), released=True)
        except Exception as e:  # noqa: BLE001 - an unreleased lease only expires later
            log.warning("could not release the writer lease of %s (it expires at %s): %s",
                        self.pipeline, held.expires, e)

    def _keep_renewing(self) -> None:
        period = self.ttl.total_seconds() / 3
        while not self._stop.wait(period):
            try:
                self.renew()
            except LeaseLost as e:
                self.on_lost(str(e))
                return
            except Exception as e:  # noqa: BLE001 - transient (object store unreachable): retry until expiry
                held = self.held
                if held is None:
                    return
                if held.expires - self.clock() <= dt.timedelta(seconds=period / 2):
                    self.on_lost(f"pipeline {self.pipeline!r}: the writer lease could not be renewed before it "
                                 f"expires ({type(e).__name__}: {e})")
                    return
                log.warning("renewing the writer lease of %s failed (%s); retrying", self.pipeline, e)


def _exit_now(message: str) -> None:
    """A holder that lost its lease stops writing at once: a hard exit, which binlake survives like
    any crash (every commit is atomic and carries its offset; the next run resumes)."""
    log.critical("%s; stopping now", message)
    os.write(2, f"error: {message}; stopping now\n".encode())
    os._exit(1)


def writer_lock(sink_path: str, pipeline: str, command: str, storage_options: dict | None = None) -> WriterLock:
    """The writer lock of a pipeline: a file lock on a local lake, a lease on an object store
    (``BINLAKE_WRITER_LOCK=file|lease`` forces one, ``BINLAKE_LEASE_SECONDS`` sets the lease's ttl)."""
    kind = os.environ.get(LOCK_ENV) or ("file" if is_local(sink_path) else "lease")
    if kind == "file":
        if not is_local(sink_path):
            raise WriterLockError(f"{LOCK_ENV}=file needs a local sink.path, not {sink_path}")
        return FileLock(sink_path, pipeline, command)
    if kind == "lease":
        ttl = float(os.environ.get(LEASE_SECONDS_ENV) or DEFAULT_LEASE_SECONDS)
        return LeaseLock(sink_path, pipeline, command, ttl=ttl, storage_options=storage_options)
    raise WriterLockError(f"{LOCK_ENV} must be 'file' or 'lease', not {kind!r}")
