"""``make ui`` (devtools/ui.py) as a person runs it: its first ``dagster dev``, with no table
catalog stored before, shows the shop tables as assets (the component discovers them when
the dev code server starts, orchestration/component.py); and a SIGTERM stops everything it
started: none of its processes (MariaDB, ``dagster dev``, the webserver, the daemon, the code
servers) is left, in its process group or in ``dagster dev``'s, and their ports are closed.
Every other way of stopping it (SIGINT, SIGHUP, the death of its parent) ends its
``until_stopped`` block as SIGTERM does, after which the same stop runs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devtools.local_mariadb import _free_port
from devtools.ui import component_state_path, graphql, group_members, wait_for_webserver

ROOT = Path(__file__).resolve().parent.parent
SHOP = {("shop", "customers"), ("shop", "orders"), ("shop", "order_items")}


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after ``pid (comm)``: state, ppid, pgrp, session, …; None once gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _process(pid: int) -> tuple[int, str] | None:
    """A live process's identity: its start time (so a reused pid is not taken for it) and command."""
    stat = _stat(pid)
    if stat is None or stat[0] == "Z":
        return None
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    return int(stat[19]), cmd


def descendants(root: int) -> dict[int, tuple[int, str]]:
    """Every live descendant of ``root``: pid → (start time, command)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _stat(int(stat.parent.name))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = {}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if (p := _process(child)) is not None:
                found[child] = p
                todo.append(child)
    return found


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
def test_make_ui_shows_the_tables_and_sigterm_stops_what_it_started(tmp_path):
    state = component_state_path("shop_ui")
    state.unlink(missing_ok=True)  # a new user's first `dagster dev`: no table catalog yet
    port, log = _free_port(), tmp_path / "ui.log"
    started = subprocess.Popen([sys.executable, "-m", "devtools.ui", "--port", str(port), "--dir",
                                str(tmp_path / "ui")], cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                               start_new_session=True)
    tree: dict[int, tuple[int, str]] = {}
    try:
        wait_for_webserver(port, started, timeout=300)
        nodes = graphql(port, "{ assetNodes { assetKey { path } } }")["assetNodes"]
        assert SHOP <= {tuple(n["assetKey"]["path"]) for n in nodes}, nodes
        assert state.is_file()  # discovered by the dev code server, not written by make ui

        tree = descendants(started.pid)
        commands = [cmd for _, cmd in tree.values()]
        assert any("mariadbd" in c for c in commands) and any("dagster_webserver" in c for c in commands) \
            and any("dagster._daemon" in c for c in commands), commands
        groups = {int(_stat(pid)[2]) for pid in tree}
        mariadb_port = int(next(c for c in commands if "mariadbd" in c).split("--port=")[1].split()[0])

        os.kill(started.pid, signal.SIGTERM)
        assert started.wait(120) == 0
        survivors = {pid: cmd for pid, (start, cmd) in tree.items() if _process(pid) == (start, cmd)}
        assert not survivors, f"left running after the stop: {survivors}"
        assert not [g for g in groups if group_members(g)], "a process group it started still has members"
        assert not listening(port) and not listening(mariadb_port)
    except BaseException:
        print(log.read_text()[-5000:], (tmp_path / "ui" / "dagster.log").read_text()[-20000:]
              if (tmp_path / "ui" / "dagster.log").exists() else "")
        raise
    finally:
        for pid, ident in tree.items():  # only what this test started, and only if still the same process
            if _process(pid) == ident:
                os.kill(pid, signal.SIGKILL)
        if started.poll() is None:
            started.kill()
            started.wait()
        state.unlink(missing_ok=True)


STOPS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGHUP": signal.SIGHUP, "parent dies": signal.SIGKILL}
CHILD = """
import pathlib, sys, time
from devtools.ui import until_stopped
with until_stopped():
    print("ready", flush=True)
    time.sleep(60)
pathlib.Path(sys.argv[1]).write_text("stopped")
"""


@pytest.mark.parametrize("how", STOPS)
def test_every_way_of_stopping_ends_the_until_stopped_block(tmp_path, how):
    """The block ``make ui`` runs in ends, and the code after it (the stop) runs, on SIGINT,
    SIGTERM and SIGHUP to it and when its parent is killed (it gets SIGTERM from the kernel)."""
    marker = tmp_path / "marker"
    child = [sys.executable, "-c", CHILD, str(marker)]
    if how == "parent dies":  # a parent killed with SIGKILL, which cannot pass anything on
        child = [sys.executable, "-c", f"import subprocess; subprocess.run({child!r})"]
    proc = subprocess.Popen(child, cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(STOPS[how])
        proc.wait(30)
        deadline = time.monotonic() + 30  # a killed parent's child stops on its own
        # write_text creates the file before it writes: wait for its text, not for the file
        while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.read_text() == "stopped"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in group_members(proc.pid):  # the child of a killed parent, if it did not stop
            os.kill(pid, signal.SIGKILL)
