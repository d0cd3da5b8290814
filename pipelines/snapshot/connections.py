"""Control connections of the processes that read chunk groups, cached across tasks: a Spark
Python worker runs its tasks one after another in one thread, so its cache lives across them;
a local runner's thread is given its slot's cache (pipelines/snapshot/runner.py).

Invariants:
- One cache per thread: a connection is never used by two threads at once.
- A connection that may be half-broken (a transient fault cut it mid-packet) is dropped and
  never reused (tests/test_snapshot_faults.py).
"""

from __future__ import annotations

import contextlib
import threading

import pymysql

from cdc_core.source.connection import ConnectionSettings, connect

Connections = dict[ConnectionSettings, pymysql.connections.Connection]

_worker = threading.local()


def _cache() -> Connections:
    conns = getattr(_worker, "connections", None)
    if conns is None:
        conns = _worker.connections = {}
    return conns


def use_connections(conns: Connections) -> None:
    """Make ``conns`` this thread's cache (a local runner's slot: its threads share it, one at a time)."""
    _worker.connections = conns


def worker_connection(c: ConnectionSettings) -> pymysql.connections.Connection:
    """A control connection cached in the (reused) Python worker across tasks, one per thread."""
    conns = _cache()
    conn = conns.get(c)
    if conn is not None:
        try:
            conn.ping(reconnect=True)
            return conn
        except pymysql.err.Error:
            conn.close()
    conn = conns[c] = connect(c)
    return conn


def drop_connection(c: ConnectionSettings) -> None:
    """Forget and close this thread's cached connection to ``c``, if any (after a transient fault)."""
    stale = _cache().pop(c, None)
    if stale is not None:
        with contextlib.suppress(pymysql.err.Error):  # "Already closed" when pymysql closed it itself
            stale.close()


def close_connections(conns: Connections) -> None:
    """Close and forget cached control connections (a local runner's, at the end of a pass)."""
    while conns:
        with contextlib.suppress(pymysql.err.Error):
            conns.popitem()[1].close()
