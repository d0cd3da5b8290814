"""How long to keep retrying a fault that passes (which faults do: cdc_core/errors.py).

``RetryPolicy`` is the schedule and budget; ``Retry`` one loop's state under it. Used by
the snapshot (a chunk group is idempotent until committed, so a failed group is read again
from its low watermark) and the stream (reconnects, Delta commits). ``retrying`` is the one
loop around a single step (a control query, a lake write): it names the step in every
warning and in the error that ends it, and, for a write, asks ``landed`` before each new
attempt whether the one that failed took effect anyway (a store that did the write but whose
answer was lost), so a write is never made twice. Tested by tests/test_snapshot_faults.py and
tests/test_control_faults.py through a TCP fault proxy, tests/test_lake_faults.py through an
HTTP one, and tests/test_engine_parts.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from cdc_core.errors import TerminalError, is_transient, one_line, transient_cause

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff between attempts, and the budget: how long a fault may last before giving up."""

    delays: tuple[float, ...] = (0.5, 1, 2, 4, 8, 15, 30)
    budget_seconds: float = 300.0
    # A group attempt with no result after this long is treated as stalled (the bulk reader has
    # no read timeout of its own) and cancelled, then retried.
    stall_seconds: float = 600.0
    read_timeout: float = 120.0  # socket read timeout of the snapshot's pymysql connections
    # The stream's binlog connection: the server sends a heartbeat every 0.25 s when it has
    # nothing else to send, so this long without a byte is a stalled connection (read again).
    binlog_silence_seconds: float = 30.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based)."""
        return self.delays[min(attempt, len(self.delays)) - 1]


class RetryBudgetExceeded(TerminalError):
    """A transient fault outlasted the retry budget (runtime failure: exit 1; a re-run resumes)."""


@dataclass
class Retry:
    """A retry loop's state under ``policy``: the delays in turn (the last repeated), for at
    most ``policy.budget_seconds`` of continuous failure."""

    policy: RetryPolicy = RetryPolicy()
    failing_since: float | None = None
    attempt: int = 0

    def next_delay(self, now: float | None = None) -> float | None:
        """The delay before the next attempt, or None when the budget is spent."""
        now = time.monotonic() if now is None else now
        self.failing_since = self.failing_since if self.failing_since is not None else now
        if now - self.failing_since > self.policy.budget_seconds:
            return None
        self.attempt += 1
        return self.policy.delay(self.attempt)

    def succeeded(self) -> None:
        self.failing_since, self.attempt = None, 0


def fault_line(error: BaseException) -> str:
    """A transient fault in one line, for warnings and the error that ends a retry loop."""
    return transient_cause(error) or f"{type(error).__name__}: {one_line(error)}"


def retrying(what: str, attempt: Callable[[], T], policy: RetryPolicy, *,
             landed: Callable[[], T | None] | None = None, stop: threading.Event | None = None) -> T:
    """``attempt()``'s result, again with backoff after each fault that passes (cdc_core/errors.py)
    until ``policy``'s budget is spent, then :class:`RetryBudgetExceeded` naming ``what`` and
    the last cause. Before each new attempt ``landed()`` (when given) says whether the one that
    failed took effect anyway: its result then, else None (a fault while asking is waited out
    like the attempt's own). An error that is not transient is raised with a note naming
    ``what``. ``stop`` set ends the waiting: the last fault is raised."""
    retry = Retry(policy)
    while True:
        try:
            return attempt()
        except Exception as e:
            if not is_transient(e):
                e.add_note(f"while {what}")
                raise
            error = e
        while True:
            delay = retry.next_delay()
            cause = fault_line(error)
            if delay is None:
                raise RetryBudgetExceeded(f"{what} kept failing for over {policy.budget_seconds:.0f} s "
                                          f"({retry.attempt + 1} attempts): {cause}") from error
            log.warning("%s failed (%s); again in %.1f s", what, cause, delay)
            if stop is not None and stop.wait(delay):
                raise error
            if stop is None:
                time.sleep(delay)
            if landed is None:
                break
            try:
                found = landed()
            except Exception as e:
                if not is_transient(e):
                    e.add_note(f"while {what}")
                    raise
                error = e
                continue
            if found is not None:
                log.info("%s: the attempt that failed had taken effect", what)
                return found
            break
