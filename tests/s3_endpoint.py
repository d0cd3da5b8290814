"""A real S3 API on loopback for the tests and bench/object_store.py: moto's server (the
app moto's ``ThreadedMotoServer`` serves, on a free port) in a process of its own
(:class:`S3Server` starts ``python -m tests.s3_endpoint``). Not a thread of the test
process: delta-rs's Python filesystem handler blocks holding the GIL while it waits for
the store, so a server thread in the same process could not answer it.

A thin WSGI layer in front of moto counts requests by kind (read over HTTP at
``/_requests``) and, when asked, acts as a gateway that drops the conditional-write
headers (``If-None-Match``/``If-Match``), as an S3-compatible store without conditional
writes does. With ``BINLAKE_S3_TRACE=<file>`` in its environment it appends every request
to that file with the seconds moto took to answer it, to read what a run asks of the store,
in order. Credentials are random per
server, so tests can search every output for them; moto accepts any.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

REGION = "us-east-1"
REPO = Path(__file__).resolve().parents[1]
logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one INFO line per request otherwise
COUNTS_PATH = "/_requests"
TRACE = os.environ.get("BINLAKE_S3_TRACE")  # a file: each request appended (start, seconds, method, path, query)


def request_kind(method: str, path: str, query: str) -> str:
    """What an S3 request does, for counting: LIST, HEAD, DELETE, or GET/PUT/POST of a Delta
    log entry or of a data file; ``control`` when it touches ``_binlake/`` (a listing: its prefix)."""
    params = parse_qs(query)
    if method == "GET" and "list-type" in params:
        kind = "LIST"
        path = "/" + params.get("prefix", [""])[0]
    elif method in ("HEAD", "DELETE"):
        kind = method
    else:
        kind = f"{method} {'log' if '/_delta_log/' in path else 'data'}"
    return f"{kind} (control)" if "/_binlake/" in path else kind


@dataclass
class S3Endpoint:
    """moto's S3 server on ``127.0.0.1:<free port>`` (run by :func:`main`); ``drop_conditions``
    strips conditional-write headers."""

    drop_conditions: bool = False
    access_key: str = field(default_factory=lambda: "AKIA" + secrets.token_hex(8).upper())
    secret_key: str = field(default_factory=lambda: "sk-" + secrets.token_urlsafe(24))
    requests: Counter = field(default_factory=Counter)  # by request_kind

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._moto = DomainDispatcherApplication(create_backend_app)
        self._server = make_server("127.0.0.1", 0, self._app, threaded=True, request_handler=MotoRequestHandler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_port}"

    def _app(self, environ, start_response):
        method, path, query = environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""), environ.get("QUERY_STRING", "")
        if path == COUNTS_PATH:  # the counts, for a benchmark in another process; DELETE resets them
            with self._lock:
                body = json.dumps(dict(self.requests)).encode()
                if method == "DELETE":
                    self.requests.clear()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        with self._lock:
            self.requests[request_kind(method, path, query)] += 1
        if self.drop_conditions:
            environ.pop("HTTP_IF_NONE_MATCH", None)
            environ.pop("HTTP_IF_MATCH", None)
        if not TRACE:
            return self._moto(environ, start_response)
        t0 = time.time()
        body = list(self._moto(environ, start_response))
        with self._lock, open(TRACE, "a") as f:
            f.write(f"{t0:.4f} {time.time() - t0:.4f} {method} {path} {query}\n")
        return body

    def serve_forever(self) -> None:
        self._server.serve_forever()



@dataclass
class S3Server:
    """An :class:`S3Endpoint` in its own process, seen from the test or benchmark."""

    endpoint: str
    access_key: str
    secret_key: str
    proc: subprocess.Popen

    @classmethod
    def start(cls, drop_conditions: bool = False) -> S3Server:
        args = [sys.executable, "-m", "tests.s3_endpoint", *(["--drop-conditions"] if drop_conditions else [])]
        proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, text=True)
        line = proc.stdout.readline()
        if not line:
            proc.wait(10)
            raise RuntimeError(f"the S3 endpoint did not start (exit {proc.returncode})")
        info = json.loads(line)
        return cls(info["endpoint"], info["access_key"], info["secret_key"], proc)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)

    def storage_options(self) -> dict[str, str]:
        """delta-rs option keys for this endpoint."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key, "AWS_REGION": REGION, "AWS_ALLOW_HTTP": "true"}

    def create_bucket(self, name: str) -> str:
        import boto3

        boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id=self.access_key,
                     aws_secret_access_key=self.secret_key).create_bucket(Bucket=name)
        return name

    def requests(self, reset: bool = False) -> Counter:
        """Requests served so far by kind (:func:`request_kind`); ``reset`` starts a new count."""
        req = urllib.request.Request(self.endpoint + COUNTS_PATH, method="DELETE" if reset else "GET")
        with urllib.request.urlopen(req, timeout=10) as r:
            return Counter(json.loads(r.read()))


def main() -> None:
    """Serve until terminated; print one JSON line with the endpoint and credentials."""
    s3 = S3Endpoint(drop_conditions="--drop-conditions" in sys.argv[1:])
    print(json.dumps({"endpoint": s3.endpoint, "access_key": s3.access_key, "secret_key": s3.secret_key}), flush=True)
    s3.serve_forever()


if __name__ == "__main__":
    main()
