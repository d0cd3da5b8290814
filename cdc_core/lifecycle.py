"""Lifecycle of a stream engine: created → starting → streaming → stopping → stopped
(or failed from any state). Invariant: only the transitions below happen; anything
else is a bug and raises."""

from __future__ import annotations

import enum
import logging

log = logging.getLogger(__name__)


class State(enum.StrEnum):
    CREATED = "created"
    STARTING = "starting"
    STREAMING = "streaming"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


_ALLOWED = {
    State.CREATED: {State.STARTING, State.FAILED},
    State.STARTING: {State.STREAMING, State.STOPPING, State.FAILED},
    State.STREAMING: {State.STARTING, State.STOPPING, State.FAILED},  # STARTING again: reconnect after a fault
    State.STOPPING: {State.STOPPED, State.FAILED},
    State.STOPPED: set(),
    State.FAILED: set(),
}


class Lifecycle:
    """The current state, with checked transitions."""

    def __init__(self) -> None:
        self.state = State.CREATED

    def to(self, new: State) -> None:
        """Move to ``new``; raises RuntimeError on a transition that is not allowed."""
        if new not in _ALLOWED[self.state]:
            raise RuntimeError(f"stream lifecycle: {self.state} → {new} is not allowed")
        log.info("stream %s → %s", self.state, new)
        self.state = new
