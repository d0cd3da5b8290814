"""Where the lake lives: a local folder or an object store (``s3://``, ``gs://``,
``abfss://``, … whatever delta-rs supports), reached with ``sink.storage_options`` —
delta-rs's own option keys — for Delta tables, control tables and the Parquet files
Spark tasks write.

Invariants (tests/test_object_store.py):
- Files are written through delta-rs's object store (``DeltaStorageHandler``), built
  from the same options as the Delta tables, so a Spark executor needs no Hadoop jars
  and no second option vocabulary; the file's size comes from the stream it was
  written to, with no extra request. On S3 a file of up to ``WRITE_BUFFER_BYTES`` is one
  ``PutObject`` through boto3 instead (:func:`write_file`), when every option is one boto3's
  client reads the same way; the key is the one delta-rs reads the file from
  (tests/test_lake_requests.py, odd folder names included).
- Commit safety. delta-rs 1.x commits version N of a table by creating
  ``_delta_log/N.json`` only if it does not exist (S3: ``PutObject`` with
  ``If-None-Match: *``); it takes no lock (its DynamoDB lock is gone, and
  ``AWS_S3_ALLOW_UNSAFE_RENAME`` no longer changes how it commits). It lists the log
  before each attempt, so the condition decides only between writers racing for one
  version — and only if the store honours it. :func:`commit_problem` checks that on an
  S3-compatible store (an S3 endpoint is configured) before binlake writes there: an
  object created with ``If-None-Match: *`` must not be overwritten by a second such put.
  Options that turn conditional writes off or ask for the lock are config errors
  (``cdc_core.config.SinkConfig``).
- Secret option values are masked in the CLI's messages
  (``cdc_core.config.SinkConfig.secret_values``).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import uuid
from collections.abc import Callable
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake.fs import DeltaStorageHandler

from cdc_core.errors import BadInput, StoreUnavailable, one_line
from cdc_core.retry import RetryBudgetExceeded, RetryPolicy, retrying

PROBE_DIR = "_binlake/commit_probe"
_proven: set[tuple] = set()  # (path, options) that passed commit_problem in this process
# Data files are buffered up to this size and sent in one part: delta-rs's output stream uploads
# a 5 MiB part per write past that size, and each part and the completion is a request (a
# snapshot group's 250,000 rows make ~10 MB: 4 requests instead of 3, bench/object_store.py).
# A larger file still goes in parts of this size. Executor memory: one buffer per open file.
WRITE_BUFFER_BYTES = 64 << 20
# The checks before anything is written wait out a store's passing fault this long, no longer:
# a store that stays unreachable is reported as such (validate, and before the writer lock).
CHECK_RETRY = RetryPolicy(delays=(0.5, 1, 2, 4), budget_seconds=30)


class UnsafeSink(BadInput, ValueError):
    """binlake cannot commit safely under ``sink.path`` (bad input: exit 2)."""


def is_local(path: str) -> bool:
    """Whether ``path`` is a local folder (no URI scheme, or ``file://``)."""
    return urlparse(path).scheme in ("", "file")


@functools.lru_cache(maxsize=64)
def _store(root: str, options: tuple[tuple[str, str], ...]) -> pafs.FileSystem:
    # max_buffer_size is read by delta-rs's output stream only; the stores' builders skip keys
    # they do not know. A value the user set wins.
    return pafs.PyFileSystem(DeltaStorageHandler(root, {"max_buffer_size": str(WRITE_BUFFER_BYTES), **dict(options)}))


def local_folder(path: str) -> str:
    """The folder a local ``path`` (a plain path or a ``file:`` URI, whose path is %-encoded) names."""
    return unquote(urlparse(path).path) if path.startswith("file:") else path


def filesystem(root: str, options: dict[str, str] | None) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem for the folder ``root`` of the lake and the prefix of paths in it:
    the local filesystem, or delta-rs's object store (one per root and options in this process)."""
    if is_local(root):
        return pafs.LocalFileSystem(), local_folder(root).rstrip("/") + "/"
    return _store(root.rstrip("/"), tuple(sorted((options or {}).items()))), ""


def _option(options: dict[str, str], *names: str) -> str | None:
    """An option by any of its delta-rs / object_store spellings (case-insensitive), else None."""
    lowered = {k.lower(): v for k, v in options.items()}
    return next((lowered[n] for n in names if n in lowered), None)


def _endpoint(options: dict[str, str]) -> str | None:
    return (_option(options, "aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint")
            or os.environ.get("AWS_ENDPOINT_URL"))


# Option keys (lower-cased) whose meaning the boto3 client below carries over exactly, or that
# concern only Delta commits. Data files go to S3 through boto3 only when every key is one of these.
_S3_CLIENT_KEYS = frozenset({
    "aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint", "aws_access_key_id", "access_key_id",
    "aws_secret_access_key", "secret_access_key", "aws_session_token", "aws_token", "session_token", "token",
    "aws_region", "region", "aws_default_region", "default_region", "aws_virtual_hosted_style_request",
    "virtual_hosted_style_request", "aws_allow_http", "allow_http", "aws_s3_allow_unsafe_rename",
    "aws_conditional_put", "conditional_put", "max_buffer_size", "timeout", "connect_timeout",
})
# delta-rs's durations (humantime: "30s", "500ms", "2 minutes"); one boto3 cannot read the same
# way sends the data files through delta-rs's store instead.
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|secs?|seconds?|m|mins?|minutes?)?\s*$")


def write_file(root: str, name: str, options: dict[str, str] | None, fill: Callable[[pa.NativeFile], object]) -> int:
    """Write the file ``name`` into the lake folder ``root``: ``fill`` writes its bytes to the
    stream it is given. Returns the file's size.

    On S3 a file of up to ``WRITE_BUFFER_BYTES`` goes in one ``PutObject`` (boto3, with the
    client of the commit check): delta-rs's output stream always makes a multipart upload, three
    requests per file, and the store then joins the parts (bench/object_store.py: a snapshot
    group's file is one part). Elsewhere, with options boto3 would not read the same way, or for
    a larger file, the bytes go through delta-rs's object store."""
    options = options or {}
    url = urlparse(root)
    timeouts = (_option(options, "timeout"), _option(options, "connect_timeout"))
    if url.scheme in ("s3", "s3a") and {k.lower() for k in options} <= _S3_CLIENT_KEYS \
            and all(t is None or _seconds(t) is not None for t in timeouts):
        sink = pa.BufferOutputStream()
        fill(sink)
        data = sink.getvalue()
        if data.size <= WRITE_BUFFER_BYTES:
            _put_object(url.netloc, f"{unquote(url.path).strip('/')}/{name}".lstrip("/"), data, options)
            return data.size
        # Larger: through delta-rs's stream, which takes bytes, not an Arrow buffer.
        fill = lambda out: out.write(data.to_pybytes())  # noqa: E731
    fs, prefix = filesystem(root, options)
    if is_local(root):  # an object store has no folders to make
        fs.create_dir(prefix.rstrip("/"), recursive=True)
    with fs.open_output_stream(prefix + name) as out:
        fill(out)
        return out.tell()


def delete_files(root: str, names: list[str], options: dict[str, str] | None) -> None:
    """Delete the files ``names`` (relative to the lake folder ``root``); one already gone is no error."""
    fs, prefix = filesystem(root, options)
    for name in names:
        try:
            fs.delete_file(prefix + name)
        except FileNotFoundError:
            pass


# S3 error codes of a request that may succeed when made again (besides any 5xx answer).
_RETRYABLE_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "InternalError",
                              "ServiceUnavailable", "TooManyRequests", "RequestLimitExceeded"})


def _put_object(bucket: str, key: str, data: pa.Buffer, options: dict[str, str]) -> None:
    """One ``PutObject`` (``key``: the one delta-rs's store resolves the file's path to). A
    fault that passes (a 5xx answer, throttling, a timeout, a connection lost), once botocore's
    own retries are spent, is :class:`StoreUnavailable`; any other refusal an ``OSError`` naming
    the object, as delta-rs's store raises. Putting a data file again is harmless: it is not
    in the table until a commit adds it."""
    from botocore.exceptions import BotoCoreError, ClientError, ConnectionError, HTTPClientError

    try:
        _s3_client(options).put_object(Bucket=bucket, Key=key, Body=data.to_pybytes())
    except (ClientError, BotoCoreError) as e:
        text = f"writing s3://{bucket}/{key}: {_boto_error(e)}"
        status = getattr(e, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        code = getattr(e, "response", {}).get("Error", {}).get("Code")
        if isinstance(e, (ConnectionError, HTTPClientError)) or status >= 500 or status == 429 \
                or code in _RETRYABLE_CODES:
            raise StoreUnavailable(text) from None
        raise OSError(text) from None


def _boto_error(e: Exception) -> str:
    """A boto3 error in one line: the store's code and message, or the client's own text."""
    err = getattr(e, "response", {}).get("Error", {})
    return f"{err.get('Code')}: {err.get('Message')}" if err else str(e)


def _s3_client(options: dict[str, str]):
    """A boto3 S3 client for the endpoint and credentials of delta-rs's options (boto3's own
    chain — environment, profile — where the options name none); one per options (and
    environment endpoint) in this process."""
    return _cached_s3_client(tuple(sorted(options.items())), os.environ.get("AWS_ENDPOINT_URL"))


@functools.lru_cache(maxsize=16)
def _cached_s3_client(items: tuple[tuple[str, str], ...], env_endpoint: str | None):
    # Building a client parses botocore's service model: 60-190 ms on 2 busy cores, paid before
    # every commit_problem check of a new sink otherwise (clients are thread-safe to share).
    # ``env_endpoint`` is only part of the cache key: _endpoint reads it.
    options = dict(items)
    import boto3
    from botocore.config import Config

    # botocore's DEBUG lines print signed request headers (the access key id): never in binlake's -v output.
    for name in ("boto3", "botocore", "s3transfer"):
        logging.getLogger(name).setLevel(logging.INFO)
    virtual = (_option(options, "aws_virtual_hosted_style_request", "virtual_hosted_style_request") or "").lower()
    return boto3.session.Session().client(
        "s3", endpoint_url=_endpoint(options),
        aws_access_key_id=_option(options, "aws_access_key_id", "access_key_id"),
        aws_secret_access_key=_option(options, "aws_secret_access_key", "secret_access_key"),
        aws_session_token=_option(options, "aws_session_token", "aws_token", "session_token", "token"),
        region_name=_option(options, "aws_region", "region", "aws_default_region", "default_region"),
        config=Config(s3={"addressing_style": "virtual" if virtual in ("true", "1") else "path"},
                      retries={"max_attempts": 3},
                      **{k: _seconds(v) for k, v in (("read_timeout", _option(options, "timeout")),
                                                     ("connect_timeout", _option(options, "connect_timeout")))
                         if v is not None}))


def _seconds(duration: str) -> float | None:
    """A delta-rs duration option in seconds, or None when it is not a plain number of ms, s or min."""
    m = _DURATION.match(duration)
    if m is None:
        return None
    unit = (m[2] or "s")[:2]
    return float(m[1]) * {"ms": 0.001, "mi": 60.0, "m": 60.0}.get(unit, 1.0)


def _conditional_write_problem(path: str, options: dict[str, str]) -> str | None:
    """Create one object under ``_binlake/commit_probe/`` twice with ``If-None-Match: *``: the
    second put must be refused (412, or 409 for a concurrent one), else the store ignores it."""
    from botocore.exceptions import BotoCoreError, ClientError

    url = urlparse(path)
    key = f"{url.path.strip('/')}/{PROBE_DIR}/{uuid.uuid4().hex}".lstrip("/")
    client = _s3_client(options)
    try:
        client.put_object(Bucket=url.netloc, Key=key, Body=b"", IfNoneMatch="*")
        try:
            client.put_object(Bucket=url.netloc, Key=key, Body=b"", IfNoneMatch="*")
        except ClientError as e:
            if e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") in (409, 412):
                return None
            raise
        finally:
            client.delete_object(Bucket=url.netloc, Key=key)
    except (ClientError, BotoCoreError) as e:
        return f"sink.path {path}: cannot write there ({_boto_error(e)})"
    return (f"sink.path {path}: the object store at {_endpoint(options)} does not honour conditional writes "
            "(a PutObject with If-None-Match: * overwrote an existing object), so two writers' Delta commits could "
            "overwrite each other; use a store that supports them (AWS S3, MinIO, R2, ...)")


def _read_problem(path: str, options: dict[str, str]) -> str | None:
    """List the lake's ``_binlake/`` folder through delta-rs's object store: reachability,
    bucket and credentials (a fault that passes is waited out for ``CHECK_RETRY``'s budget)."""
    fs, prefix = filesystem(path, options)
    try:
        retrying(f"listing {path}", lambda: fs.get_file_info(pafs.FileSelector(f"{prefix}_binlake",
                                                                               allow_not_found=True)), CHECK_RETRY)
    except (OSError, RetryBudgetExceeded) as e:
        return f"sink.path {path}: cannot read there ({one_line(e)})"
    return None


def commit_problem(path: str, options: dict[str, str] | None) -> str | None:
    """Why binlake could not commit safely under ``path``, in one line, or None. Any object
    store must be readable there (one LIST). S3 at a configured endpoint (an S3-compatible
    store) must refuse to overwrite an object created with ``If-None-Match: *`` (three
    requests, the object removed). AWS S3 itself, GCS and Azure honour conditional writes;
    a local folder commits by atomic rename. Checked once per process, sink and options
    while it passes."""
    options = options or {}
    if is_local(path):
        return None
    key = (path, tuple(sorted(options.items())))
    if key in _proven:
        return None
    problem = _read_problem(path, options)
    if problem is None and urlparse(path).scheme in ("s3", "s3a") and _endpoint(options):
        problem = _conditional_write_problem(path, options)
    if problem is None:
        _proven.add(key)
    return problem


def require_safe_commits(path: str, options: dict[str, str] | None) -> None:
    """Raise :class:`UnsafeSink` when :func:`commit_problem` finds a problem."""
    problem = commit_problem(path, options)
    if problem:
        raise UnsafeSink(problem)
