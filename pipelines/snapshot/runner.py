"""Where the snapshot's chunk groups run: each group a one-task Spark job, or
(``source.snapshot.runner``: ``local``, and ``auto`` on a ``local[...]`` master) the same task
function in a thread of this process, Spark not started: on one machine Spark brings no
cores, only a JVM's start and Python workers (bench/snapshot.py --whole-process).

Invariants:
- Concurrent binlog readers use distinct server ids: ``source.server_id + 1 + slot``.
- Either runner runs the same task function (pipelines/snapshot/task.py ``run_group``) with the
  same retries; a local attempt that stalls is left behind in its daemon thread (a thread
  cannot be interrupted), its file never committed, as a cancelled Spark task's is not
  (tests/test_snapshot_faults.py and tests/test_types.py run both runners).
- Faults (tests/test_snapshot_faults.py, tests/test_lake_faults.py): a group is idempotent
  until committed, so one hit by a transient fault of the source or of the object store
  writing its file (cdc_core/errors.py) is read again, with backoff, until
  ``RetryPolicy.budget_seconds`` of failing, then ``RetryBudgetExceeded``; a fault retrying
  cannot fix is ``GroupFailed``. Once the driver gives up, no group starts another attempt.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

from cdc_core.config import BinlakeConfig
from cdc_core.errors import STORE
from cdc_core.retry import Retry, RetryBudgetExceeded, RetryPolicy
from pipelines.snapshot.connections import Connections, close_connections, use_connections
from pipelines.snapshot.task import GroupResult, GroupTask, GroupWritten, TaskFault
from pipelines.spark.session import context_of, get_spark_context, snapshot_on_spark

if TYPE_CHECKING:  # Spark is imported where it starts (pipelines/spark/session.py)
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

STOPPED = "the snapshot was stopped"


class GroupFailed(RuntimeError):
    """A chunk group failed on an executor for a reason retrying cannot fix (the message says which)."""


class GroupStopped(RuntimeError):
    """A group's attempts ended because the driver gave up (its rows are never committed)."""


def next_attempt_in(retry: Retry, what: str, cause: str) -> float:
    """Seconds to wait before the next attempt at ``what`` after a transient ``cause``; raises
    :class:`RetryBudgetExceeded` once the fault outlasted the budget."""
    delay = retry.next_delay()
    if delay is None:
        who = "the object store" if cause.startswith(STORE) else "the source"
        raise RetryBudgetExceeded(f"{what}: {who} kept failing for over {retry.policy.budget_seconds:.0f} s "
                                  f"({retry.attempt + 1} attempts): {cause}")
    log.warning("%s: %s; again in %.1f s", what, cause, delay)
    return delay


class GroupRunner:
    """Runs chunk groups ``slots`` at a time, on Spark (``sc`` set) or in threads of this
    process, each again after a transient fault (see the module invariants)."""

    def __init__(self, cfg: BinlakeConfig, spark: SparkSession | SparkContext | None, policy: RetryPolicy,
                 fn: Callable[[GroupTask], GroupResult]):
        self.cfg = cfg
        self.policy = policy
        self.fn = fn  # what reads a group (bench/snapshot.py --profile times it)
        self.sc: SparkContext | None = None
        if snapshot_on_spark(cfg, spark):  # a session's or a bare context (`binlake snapshot` starts no SQL session)
            self.sc = context_of(spark) if spark is not None else get_spark_context(cfg.spark.master, cfg.spark.conf)
        # Concurrent groups: the configured parallelism, but no more than Spark has task slots
        # (extra concurrent jobs would only queue inside Spark).
        self.slots = max(1, min(cfg.pipeline.parallelism, self.sc.defaultParallelism if self.sc else math.inf))
        self.retries = 0  # group attempts repeated after a transient source fault
        self._free: list[int] = list(range(self.slots))
        self._lock = threading.Lock()
        self._abort = threading.Event()  # the driver gave up: no group starts another attempt
        # The local runner's cached control connections, per slot (one thread per slot at a time).
        self._slot_connections: dict[int, Connections] = {}

    @contextlib.contextmanager
    def running(self, tasks: list[GroupTask]) -> Iterator[dict[Future, GroupTask]]:
        """Start ``tasks``: futures of their :class:`GroupWritten` (or of the error that ended
        them), by future. Leaving the block by an exception stops them: queued groups never run
        and running ones start no other attempt (their rows would never be committed)."""
        self._abort.clear()  # a new pass after one that failed (a DDL changed a table while it was read)
        pool = ThreadPoolExecutor(self.slots, thread_name_prefix="snapshot")
        try:
            yield {pool.submit(self._run, t): t for t in tasks}
        except BaseException:
            self._abort.set()
            pool.shutdown(wait=False, cancel_futures=True)
            if self.sc is not None:
                self.sc.cancelAllJobs()
            pool.shutdown(wait=True)  # running groups end with their cancelled jobs: their slots are free again
            raise
        else:
            pool.shutdown()
        finally:
            for conns in self._slot_connections.values():
                close_connections(conns)

    def _run(self, task: GroupTask) -> GroupWritten:
        """Run one group, again with backoff after a transient source fault (a group is
        idempotent until the driver commits it) until the retry budget is spent."""
        what = task.describe()
        retry = Retry(self.policy)
        while not self._abort.is_set():
            result = self._attempt(task, what)
            if isinstance(result, GroupWritten):
                return result
            if not result.retryable:
                log.debug("snapshot of %s failed on the executor:\n%s", what, result.traceback)
                raise GroupFailed(f"snapshot of {what}: {result.message}")
            if self._abort.is_set():
                break
            delay = next_attempt_in(retry, f"snapshot of {what}", result.message)
            with self._lock:
                self.retries += 1
            self._abort.wait(delay)
        raise GroupStopped(f"snapshot of {what}: {STOPPED}")  # never committed: the driver has left

    def _attempt(self, task: GroupTask, what: str) -> GroupResult:
        """One attempt at the group, with a server id of its own (a free slot's)."""
        with self._lock:
            slot = self._free.pop()
        try:
            bound = replace(task, server_id=self.cfg.source.server_id + 1 + slot)
            return self._on_spark(bound, what) if self.sc is not None else self._here(bound, slot)
        finally:
            with self._lock:
                self._free.append(slot)

    def _stalled(self) -> TaskFault:
        return TaskFault(f"no answer from the source for {self.policy.stall_seconds:.0f} s (stalled read)",
                         retryable=True)

    def _on_spark(self, task: GroupTask, what: str) -> GroupResult:
        """The group as a one-task Spark job, cancelled as stalled after ``stall_seconds``. The
        result crosses back pickled (frozen dataclasses of importable modules)."""
        sc = self.sc
        group = f"binlake-{uuid.uuid4().hex}"
        stalled = threading.Event()

        def cancel() -> None:
            stalled.set()
            sc.cancelJobGroup(group)

        timer = threading.Timer(self.policy.stall_seconds, cancel)
        try:
            sc.setJobGroup(group, f"binlake snapshot {what}", interruptOnCancel=True)
            timer.start()
            return sc.parallelize([task], 1).map(self.fn).collect()[0]
        except Exception:
            if stalled.is_set():
                return self._stalled()
            raise
        finally:
            timer.cancel()

    def _here(self, task: GroupTask, slot: int) -> GroupResult:
        """The group in a thread of this process (the local runner). A read blocked in the
        source's client cannot be interrupted from outside: after ``stall_seconds`` (or when
        the driver gives up) the attempt is left behind in its daemon thread, its file is never
        committed, and the group is read again."""
        answer: list = []
        fn = self.fn
        conns = self._slot_connections.setdefault(slot, {})

        def work() -> None:
            use_connections(conns)
            try:
                answer.append(fn(task))
            except BaseException as e:  # noqa: BLE001 - raised again on the driver's side below
                answer.append(e)

        thread = threading.Thread(target=work, name="snapshot-group", daemon=True)
        thread.start()
        deadline = time.monotonic() + self.policy.stall_seconds
        while thread.is_alive():
            left = deadline - time.monotonic()
            if self._abort.is_set() or left <= 0:
                self._slot_connections.pop(slot, None)  # the thread left behind keeps its connection
                return TaskFault(STOPPED, retryable=True) if self._abort.is_set() else self._stalled()
            thread.join(min(left, 0.2))
        if isinstance(answer[0], BaseException):
            raise answer[0]
        return answer[0]
