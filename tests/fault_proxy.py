"""A TCP fault proxy for the tests: binlake connects to the proxy, the proxy to MariaDB, and
faults are injected at chosen moments.

Loopback only and bounded: it listens on 127.0.0.1, forwards to one loopback target, serves at
most ``max_connections`` at once (more are refused) and stops with :meth:`FaultProxy.stop` (or
its context manager); every thread is a daemon.

Faults:
- :meth:`FaultProxy.outage` (or ``start_outage`` / ``end_outage``): while the block runs, every
  open connection is dropped (RST) and new ones are closed as soon as they are accepted.
- :meth:`FaultProxy.drop_all`: drop every open connection now.
- a :class:`Rule`, armed by bytes the client sends (a query text such as ``b"SHOW MASTER
  STATUS"``, a table name in a chunk's SELECT, the binlog file name of a COM_BINLOG_DUMP):
  ``drop`` closes the connection before the request reaches the server; ``cut`` lets the
  request through and closes the connection in the middle of the answer (half of its first
  bytes delivered: a packet cut mid-way); ``stall`` lets the request through and holds the
  answer back for ``seconds`` (a read that stalls), then goes on.
  ``outage`` drops the request and starts an outage (see above) that lasts until
  :meth:`FaultProxy.end_outage`. ``skip`` lets the first matches pass, ``times`` bounds how often the rule fires;
  ``Rule.fired`` counts the faults injected, so a test can assert they happened.

The MySQL protocol is not parsed: a rule matches raw bytes in what the client sends, which is
enough to pick a statement or a replication request. Reused by the stream fault tests.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Literal

RECV_BYTES = 65536


@dataclass
class Rule:
    """A fault fired when the client sends bytes containing ``match`` (see the module docstring)."""

    match: bytes
    action: Literal["drop", "cut", "stall", "outage"]
    times: int = 1
    skip: int = 0
    seconds: float = 0.0  # stall only
    seen: int = 0
    fired: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def hit(self, data: bytes) -> bool:
        """Whether this request fires the rule (counts it)."""
        if self.match not in data:
            return False
        with self.lock:
            self.seen += 1
            if self.seen <= self.skip or self.fired >= self.times:
                return False
            self.fired += 1
            return True


def _reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), as a dropped network path or a killed peer looks."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class _Link:
    """One proxied connection: client socket, server socket and two pumps."""

    def __init__(self, proxy: FaultProxy, client: socket.socket, server: socket.socket):
        self.proxy, self.client, self.server = proxy, client, server
        self.closed = threading.Event()
        self.pending: Rule | None = None  # a cut/stall waiting for the answer to its request

    def start(self) -> None:
        threading.Thread(target=self._up, daemon=True, name="proxy-up").start()
        threading.Thread(target=self._down, daemon=True, name="proxy-down").start()

    def close(self) -> None:
        if not self.closed.is_set():
            self.closed.set()
            _reset(self.client)
            _reset(self.server)
            self.proxy._forget(self)

    def _up(self) -> None:
        """Client → server, where rules are matched."""
        try:
            while not self.closed.is_set():
                data = self.client.recv(RECV_BYTES)
                if not data:
                    break
                rule = next((r for r in self.proxy.rules if r.hit(data)), None)
                if rule is not None and rule.action in ("drop", "outage"):
                    if rule.action == "outage":
                        self.proxy.start_outage()
                    break
                if rule is not None:
                    self.pending = rule
                self.server.sendall(data)
        except OSError:
            pass
        self.close()

    def _down(self) -> None:
        """Server → client, where cuts and stalls act on the answer."""
        try:
            while not self.closed.is_set():
                data = self.server.recv(RECV_BYTES)
                if not data:
                    break
                rule, self.pending = self.pending, None
                if rule is not None and rule.action == "cut":
                    self.client.sendall(data[: max(1, len(data) // 2)])
                    break
                if rule is not None and rule.action == "stall":
                    self.closed.wait(rule.seconds)
                self.client.sendall(data)
        except OSError:
            pass
        self.close()


class FaultProxy:
    """A loopback TCP proxy to ``target_port`` that injects faults (see the module docstring)."""

    def __init__(self, target_port: int, *, target_host: str = "127.0.0.1", max_connections: int = 64):
        if target_host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("the fault proxy only forwards to loopback")
        self.target = (target_host, target_port)
        self.max_connections = max_connections
        self.rules: list[Rule] = []
        self.connections_seen = 0
        self._links: set[_Link] = set()
        self._lock = threading.Lock()
        self._refusing = False
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.host, self.port = "127.0.0.1", self._listener.getsockname()[1]
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    def add(self, rule: Rule) -> Rule:
        """Arm a rule; returns it (its ``fired`` counts the faults injected)."""
        self.rules.append(rule)
        return rule

    def drop_all(self) -> int:
        """Drop every open connection now; returns how many were dropped."""
        with self._lock:
            links = list(self._links)
        for link in links:
            link.close()
        return len(links)

    def start_outage(self) -> None:
        """The source becomes unreachable: open connections dropped, new ones refused."""
        self._refusing = True
        self.drop_all()

    def end_outage(self) -> None:
        self._refusing = False

    @contextlib.contextmanager
    def outage(self):
        """The source is unreachable while the block runs."""
        self.start_outage()
        try:
            yield
        finally:
            self.end_outage()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                full = len(self._links) >= self.max_connections
            if self._refusing or full:
                _reset(client)
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
                server.settimeout(None)
            except OSError:
                _reset(client)
                continue
            link = _Link(self, client, server)
            with self._lock:
                self._links.add(link)
                self.connections_seen += 1
            link.start()

    def _forget(self, link: _Link) -> None:
        with self._lock:
            self._links.discard(link)

    def stop(self) -> None:
        """Stop listening and drop every connection."""
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self.drop_all()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def via(cfg, proxy: FaultProxy):
    """The same pipeline config (``cdc_core.config.BinlakeConfig``) reaching the source through ``proxy``."""
    return cfg.model_copy(update={"source": cfg.source.model_copy(update={"port": proxy.port})})


def wait_until(predicate, timeout: float, interval: float = 0.05) -> bool:
    """Poll ``predicate`` until true or ``timeout`` seconds pass (a bound, never a timing assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
