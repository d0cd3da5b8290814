"""How long to keep retrying a fault that passes (which faults do: cdc_core/errors.py).

``RetryPolicy`` is the schedule and budget; ``Retry`` one loop's state under it. Used by
the snapshot (a chunk group is idempotent until committed, so a failed group is read again
from its low watermark) and the stream (reconnects, Delta commits). Tested by
tests/test_snapshot_faults.py through a TCP fault proxy and tests/test_engine_parts.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from cdc_core.errors import TerminalError


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
