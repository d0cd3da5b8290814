"""An HTTP fault proxy in front of the tests' S3 endpoint (tests/s3_endpoint.py): binlake's
storage options point at the proxy, the proxy forwards each request to moto, and faults are
injected into the requests a rule matches, by method and object key (tests/fault_proxy.py
does the same at TCP level for MySQL).

In a process of its own (:class:`S3FaultProxy` starts ``python -m tests.s3_fault_proxy``), as
the endpoint is: delta-rs's Python filesystem handler holds the GIL while it waits for the
store, so proxy threads in the process under test could not answer it. Rules are armed over
HTTP at ``/_faults`` (POST a JSON list; GET returns them with their counts; DELETE clears).
Loopback only: it listens on 127.0.0.1 and forwards to one loopback endpoint.

A :class:`S3Fault` matches a request by ``method`` (``LIST`` is a GET with ``list-type``),
a regex searched in its path (the bucket and key: ``_delta_log/\\d+\\.json$`` is a Delta commit,
``/_binlake/`` a control table) and one in its query (``partNumber=`` a multipart part,
``uploads`` a multipart start); ``skip`` lets the first matches pass, ``times`` bounds how often
it fires. Actions:

- ``error``: answered here with ``status`` and an S3 error body (``code``), never forwarded:
  500 ``InternalError``, 503 ``SlowDown`` (throttling);
- ``reset``: the connection is reset (RST) after half of the request body was read: a
  connection lost mid-upload; never forwarded;
- ``slow``: held ``seconds`` before it is forwarded (a slow upload), then answered;
- ``late``: forwarded, its answer held ``seconds`` (a store slow to answer: a client timeout
  gives up on a request that landed);
- ``lost``: forwarded and done by the store, then the connection is closed before any byte of
  the answer is sent (FIN; ``rst`` for a reset): the client cannot know whether it landed.

``fired`` counts the faults injected and ``seen`` the matching requests, so a test asserts
that its faults happened; every request is counted by kind too (``requests``).
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import socketserver
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Literal
from urllib.parse import parse_qs, unquote, urlparse

from tests.s3_endpoint import REPO, request_kind

CONTROL_PATH = "/_faults"
Action = Literal["error", "reset", "slow", "late", "lost"]
_REASONS = {500: "Internal Server Error", 503: "Service Unavailable", 429: "Too Many Requests"}
LOG_COMMIT = r"/_delta_log/\d{20}\.json$"  # a Delta commit's log entry (not a checkpoint's)


@dataclass
class S3Fault:
    """A fault fired on the requests it matches (see the module docstring)."""

    action: Action
    method: str | None = None  # GET, PUT, POST, HEAD, DELETE, or LIST; None: any
    path: str = ""  # regex searched in the request path (/bucket/key)
    query: str = ""  # regex searched in the query string
    times: int = 1
    skip: int = 0
    status: int = 503  # error only
    code: str = "SlowDown"  # error only: the S3 error code of the body
    seconds: float = 0.0  # slow, late
    rst: bool = False  # lost: close with a reset instead of a FIN
    seen: int = 0
    fired: int = 0

    def matches(self, method: str, path: str, query: str) -> bool:
        listing = method == "GET" and "list-type" in parse_qs(query)
        if self.method and self.method != ("LIST" if listing else method):
            return False
        return bool(re.search(self.path, path)) and bool(re.search(self.query, query))


@dataclass
class _Request:
    method: str
    target: str
    head: bytes  # the request line and headers as sent
    headers: dict[str, str]  # lower-cased names

    @property
    def path(self) -> str:
        return unquote(urlparse(self.target).path)

    @property
    def query(self) -> str:
        return urlparse(self.target).query


class _Faults:
    """The armed rules and the request counts, shared by the handler threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.rules: list[S3Fault] = []
        self.requests: Counter = Counter()

    def pick(self, req: _Request) -> S3Fault | None:
        with self.lock:
            self.requests[request_kind(req.method, req.path, req.query)] += 1
            for rule in self.rules:
                if rule.matches(req.method, req.path, req.query):
                    rule.seen += 1
                    if rule.seen > rule.skip and rule.fired < rule.times:
                        rule.fired += 1
                        return rule
            return None

    def state(self) -> dict:
        with self.lock:
            return {"rules": [asdict(r) for r in self.rules], "requests": dict(self.requests)}


def _read_head(rfile) -> tuple[bytes, list[bytes]] | None:
    """The request or status line and header lines up to the blank line (None at EOF)."""
    first = rfile.readline(65537)
    while first in (b"\r\n", b"\n"):
        first = rfile.readline(65537)
    if not first:
        return None
    lines = []
    while True:
        line = rfile.readline(65537)
        if line in (b"\r\n", b"\n", b""):
            return first, lines
        lines.append(line)


def _headers(lines: list[bytes]) -> dict[str, str]:
    out = {}
    for line in lines:
        name, _, value = line.decode("latin-1").partition(":")
        out[name.strip().lower()] = value.strip()
    return out


def _body(rfile, headers: dict[str, str], *, until_close: bool = False) -> bytes:
    """A message body as sent (chunked bodies kept in their chunked form)."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raw = bytearray()
        while True:
            size_line = rfile.readline(65537)
            raw += size_line
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, up to the blank line
                    line = rfile.readline(65537)
                    raw += line
                    if line in (b"\r\n", b"\n", b""):
                        return bytes(raw)
            raw += rfile.read(size + 2)
    if "content-length" in headers:
        return rfile.read(int(headers["content-length"]))
    return rfile.read() if until_close else b""


def _reset(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class _Handler(socketserver.StreamRequestHandler):
    """One client connection: requests in turn (keep-alive), each forwarded on a fresh
    connection to the endpoint."""

    server: _Server

    def handle(self) -> None:
        while True:
            head = _read_head(self.rfile)
            if head is None:
                return
            first, lines = head
            method, target, _ = first.decode("latin-1").split(" ", 2)
            headers = _headers(lines)
            if headers.get("expect", "").lower() == "100-continue":
                # Answered here (botocore waits for it before sending a body); not forwarded, so
                # the endpoint's answer is never an interim one.
                lines = [x for x in lines if not x.lower().startswith(b"expect:")]
                self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                self.wfile.flush()
            req = _Request(method, target, first + b"".join(lines) + b"\r\n", headers)
            if req.path == CONTROL_PATH:
                self._control(req)
                continue
            if not self._proxy(req):
                return

    def _control(self, req: _Request) -> None:
        faults = self.server.faults
        body = _body(self.rfile, req.headers)
        if req.method == "POST":
            with faults.lock:
                faults.rules = [S3Fault(**r) for r in json.loads(body or b"[]")]
        elif req.method == "DELETE":
            with faults.lock:
                faults.rules, faults.requests = [], Counter()
        self._send(200, "OK", json.dumps(faults.state()).encode(), "application/json")

    def _send(self, status: int, reason: str, body: bytes, ctype: str = "application/xml") -> None:
        self.wfile.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n"
                         f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        self.wfile.flush()

    def _proxy(self, req: _Request) -> bool:
        """Forward ``req`` (or inject its fault); whether the client connection stays open."""
        rule = self.server.faults.pick(req)
        if rule is not None and rule.action == "reset":
            length = int(req.headers.get("content-length", "0"))
            self.rfile.read(length // 2)  # half the upload arrives, then the path breaks
            _reset(self.connection)
            return False
        body = _body(self.rfile, req.headers)
        if rule is not None and rule.action == "error":
            error = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{rule.code}</Code>'
                     f"<Message>injected by the test's fault proxy</Message><RequestId>fault</RequestId></Error>")
            self._send(rule.status, _REASONS.get(rule.status, "Error"), error.encode())
            return True
        if rule is not None and rule.action == "slow":
            time.sleep(rule.seconds)
        response, close = self._forward(req, body)
        if rule is not None and rule.action == "lost":
            if rule.rst:
                _reset(self.connection)
            else:
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
            return False
        if rule is not None and rule.action == "late":
            time.sleep(rule.seconds)
        try:
            self.wfile.write(response)
            self.wfile.flush()
        except OSError:
            return False
        return not close

    def _forward(self, req: _Request, body: bytes) -> tuple[bytes, bool]:
        """The endpoint's whole answer to ``req`` as bytes, and whether it closes the connection."""
        with socket.create_connection(self.server.target, timeout=120) as up:
            up.sendall(req.head + body)
            rfile = up.makefile("rb")
            first, lines = _read_head(rfile) or (b"HTTP/1.1 502 Bad Gateway\r\n", [])
            headers = _headers(lines)
            status = int(first.split(b" ", 2)[1])
            bodiless = req.method == "HEAD" or status in (204, 304) or 100 <= status < 200
            close = "close" in headers.get("connection", "").lower() or first.startswith(b"HTTP/1.0")
            framed = "content-length" in headers or "chunked" in headers.get("transfer-encoding", "").lower()
            data = b"" if bodiless else _body(rfile, headers, until_close=not framed)
            return first + b"".join(lines) + b"\r\n" + data, close or (not bodiless and not framed)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, target: tuple[str, int]):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.target = target
        self.faults = _Faults()


@dataclass
class S3FaultProxy:
    """The proxy in its own process, seen from the test (see the module docstring)."""

    endpoint: str
    target: str
    proc: subprocess.Popen
    _opened: list = field(default_factory=list, repr=False)

    @classmethod
    def start(cls, target: str) -> S3FaultProxy:
        """A proxy forwarding to the S3 endpoint ``target`` (``http://127.0.0.1:<port>``)."""
        proc = subprocess.Popen([sys.executable, "-m", "tests.s3_fault_proxy", target], cwd=REPO,
                                stdout=subprocess.PIPE, text=True)
        line = proc.stdout.readline()
        if not line:
            proc.wait(10)
            raise RuntimeError(f"the S3 fault proxy did not start (exit {proc.returncode})")
        return cls(json.loads(line)["endpoint"], target, proc)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)

    def __enter__(self) -> S3FaultProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def storage_options(self, options: dict[str, str]) -> dict[str, str]:
        """``options`` (an endpoint's delta-rs options) reaching the store through this proxy."""
        return {**options, "AWS_ENDPOINT_URL": self.endpoint}

    def _call(self, method: str, body: bytes | None = None) -> dict:
        req = urllib.request.Request(self.endpoint + CONTROL_PATH, data=body, method=method)
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def arm(self, *rules: S3Fault) -> None:
        """Replace the armed rules by ``rules`` (their counts start at 0)."""
        self._call("POST", json.dumps([asdict(r) for r in rules]).encode())

    def clear(self) -> None:
        """No rule armed; the request counts start again."""
        self._call("DELETE")

    def rules(self) -> list[S3Fault]:
        """The armed rules with their counts."""
        return [S3Fault(**r) for r in self._call("GET")["rules"]]

    def requests(self) -> Counter:
        """Requests seen since the last :meth:`clear`, by kind (tests/s3_endpoint.py: ``request_kind``)."""
        return Counter(self._call("GET")["requests"])


def main() -> None:
    """Serve until terminated; print one JSON line with the proxy's endpoint."""
    target = urlparse(sys.argv[1])
    if target.hostname not in ("127.0.0.1", "localhost"):
        raise SystemExit("the S3 fault proxy only forwards to loopback")
    server = _Server((target.hostname, target.port))
    print(json.dumps({"endpoint": f"http://127.0.0.1:{server.server_address[1]}"}), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
