"""Waiting for backfill requests another process works on (pipelines/backfill/requests.py):
the CLI's ``backfill`` and Dagster's backfill job wait this way. No server needed: the
requests live in the lake's control tables."""

from __future__ import annotations

import shutil

import pytest

from cdc_core.chunks.incremental import BackfillRequest, BackfillState
from cdc_core.config import parse_config
from cdc_core.errors import TerminalError
from pipelines.backfill.requests import current, wait_for
from pipelines.lake.control_store import ControlStore


def _config(lake):
    return parse_config({"pipeline": {"name": "p"}, "sink": {"path": str(lake)},
                         "source": {"user": "cdc", "tables": [r"shop\..*"]}})


def test_waiting_returns_the_states_once_every_request_is_finished(tmp_path):
    cfg = _config(tmp_path / "lake")
    store = ControlStore.of(cfg)
    done, running = BackfillRequest.new("shop.a").next(state=BackfillState.DONE), BackfillRequest.new("shop.b")
    store.save_backfill(done, running.next(state=BackfillState.CANCELLED))
    seen = []
    reqs = wait_for(cfg, [done.id, running.id], seen.append, seconds=5, poll_seconds=0.01)
    assert [r.state for r in reqs] == [BackfillState.DONE, BackfillState.CANCELLED]
    assert seen == [reqs]


def test_a_request_that_is_gone_is_an_error_naming_it(tmp_path):
    lake = tmp_path / "lake"
    cfg = _config(lake)
    req = BackfillRequest.new("shop.a")
    ControlStore.of(cfg).save_backfill(req)
    assert [r.id for r in current(cfg, [req.id])] == [req.id]
    shutil.rmtree(lake / "_binlake")  # the user reset the lake; a retried wait still names the request
    ControlStore.of(cfg).save_backfill(BackfillRequest.new("shop.b"))
    with pytest.raises(TerminalError, match=f"backfill request {req.id} is no longer in pipeline p"):
        wait_for(cfg, [req.id], lambda reqs: None, seconds=5, poll_seconds=0.01)
    with pytest.raises(TerminalError, match="_binlake was removed or replaced"):
        current(cfg, [req.id])
