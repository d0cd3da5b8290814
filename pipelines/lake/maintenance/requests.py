"""``binlake maintain`` handed to the running stream: a request stored in
``_binlake/maintenance_requests`` (one row per state change, the latest ``seq`` of an ``id``
is its state, as backfill requests), taken by the stream between batches, carried out as the
stream's own maintenance is (compaction off its thread, committed between batches; then a
vacuum), and answered with what was done (``detail``: a :class:`MaintenanceReport` as JSON),
which the command waits for and prints.

Invariants (tests/test_maintenance_stream.py): a request is answered once, with the report of
the maintenance it asked for; a request for a table the stream does not write is answered at
once, naming it.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import time
import uuid
from dataclasses import asdict, dataclass, replace

from cdc_core.config import BinlakeConfig
from cdc_core.errors import TerminalError
from pipelines.lake.control_store import ControlStore


class RequestState(enum.StrEnum):
    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True)
class TableReport:
    """What maintenance did to one table: its files before and after, and each step's account."""

    table: str
    files_before: int
    files_after: int
    compaction: str | None = None  # what it did (CompactionResult.describe), None: nothing to compact
    bytes_deleted: int = 0
    files_deleted: int = 0
    vacuum: str | None = None  # VacuumResult.describe, None: not vacuumed
    note: str | None = None  # why a step was skipped or failed


@dataclass(frozen=True)
class MaintenanceReport:
    """What one maintenance (``binlake maintain``, or a request the stream carried out) did."""

    tables: tuple[TableReport, ...]
    by: str  # "this process" or "the running stream"

    def to_json(self) -> str:
        return json.dumps({"by": self.by, "tables": [asdict(t) for t in self.tables]})

    @classmethod
    def from_json(cls, text: str) -> MaintenanceReport:
        raw = json.loads(text)
        return cls(tuple(TableReport(**t) for t in raw["tables"]), raw["by"])


@dataclass(frozen=True)
class MaintenanceRequest:
    """One state of a request: maintain ``table`` (a sink ``db.table``; None: every table)."""

    id: str
    table: str | None
    state: RequestState
    detail: str  # the report as JSON once done, the failure once failed
    seq: int
    updated_at: dt.datetime | None = None

    @classmethod
    def new(cls, table: str | None) -> MaintenanceRequest:
        return cls(uuid.uuid4().hex[:12], table, RequestState.PENDING, "", 0, dt.datetime.now(dt.UTC))

    def answered(self, state: RequestState, detail: str) -> MaintenanceRequest:
        return replace(self, state=state, detail=detail, seq=self.seq + 1, updated_at=dt.datetime.now(dt.UTC))

    def to_row(self) -> dict:
        return {"id": self.id, "table": self.table, "state": str(self.state), "detail": self.detail,
                "seq": self.seq, "updated_at": self.updated_at}

    @classmethod
    def from_row(cls, r: dict) -> MaintenanceRequest:
        return cls(r["id"], r["table"], RequestState(r["state"]), r["detail"] or "", r["seq"], r["updated_at"])

    @property
    def report(self) -> MaintenanceReport | None:
        return MaintenanceReport.from_json(self.detail) if self.state == RequestState.DONE else None


def latest(store: ControlStore) -> dict[str, MaintenanceRequest]:
    """Every request's current state, by id (oldest first)."""
    out: dict[str, MaintenanceRequest] = {}
    for r in store.maintenance_requests():
        out[r["id"]] = MaintenanceRequest.from_row(r)
    return out


def pending(store: ControlStore) -> list[MaintenanceRequest]:
    """Requests not answered yet, oldest first."""
    return [r for r in latest(store).values() if r.state == RequestState.PENDING]


def request_maintenance(cfg: BinlakeConfig, table: str | None) -> MaintenanceRequest:
    """Store a request for the running stream to maintain ``table`` (None: every table)."""
    req = MaintenanceRequest.new(table)
    ControlStore.of(cfg).save_maintenance_request(req.to_row())
    return req


def answer(store: ControlStore, req: MaintenanceRequest, state: RequestState, detail: str) -> None:
    """Record the request's answer (the stream, once it carried it out)."""
    store.save_maintenance_request(req.answered(state, detail).to_row())


def wait_for(cfg: BinlakeConfig, request_id: str, seconds: float, poll_seconds: float = 1.0
             ) -> MaintenanceRequest:
    """The request's state once answered, or as it is after ``seconds``."""
    store = ControlStore.of(cfg)
    deadline = time.monotonic() + seconds
    while True:
        req = latest(store).get(request_id)
        if req is None:
            raise TerminalError(f"maintenance request {request_id} is no longer in pipeline {cfg.pipeline.name}'s "
                                f"control tables ({cfg.sink.path}/_binlake was removed or replaced while waiting)")
        if req.state != RequestState.PENDING or time.monotonic() >= deadline:
            return req
        time.sleep(poll_seconds)
