"""How binlake reaches the source server: connection settings (TLS included), control-plane
connections and the list of captured tables.

Every connection binlake opens takes its settings from :class:`ConnectionSettings`: the
control connections (pymysql), the binlog connection (python-mysql-replication passes the
same keyword arguments to pymysql) and the chunk reads (cdc_core/chunks/bulk_read.py), so
``source.ssl`` covers all of them (tests/test_tls.py).
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from urllib.parse import quote

import pymysql

from cdc_core.config import BinlakeConfig, SourceConfig
from cdc_core.schema.table import TableSchema, describe_in, list_tables


@dataclass(frozen=True)
class TlsSettings:
    """``source.ssl`` as plain, picklable values (they travel to Spark executors: the files
    must exist at the same paths there)."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    verify: bool = True
    check_hostname: bool = True

    def context(self) -> ssl.SSLContext:
        """A client TLS context: the server certificate verified against ``ca`` (or the system's
        CAs) and the host name, unless ``verify`` / ``check_hostname`` turn that off.

        Built once per process while the files stay as they are: building one loads the CAs and
        the key pair (~26 ms of CPU), and a snapshot opens a dozen connections. A file rewritten
        since (a rotated certificate: another modification time, size or inode) makes the next
        call build it afresh, so a long stream's reconnect uses what is on disk."""
        files = tuple(_signature(f) for f in (self.ca, self.cert, self.key))
        cached = _CONTEXTS.get(self)
        if cached is not None and cached[0] == files:
            return cached[1]
        ctx = self._build()
        _CONTEXTS[self] = (files, ctx)
        return ctx

    def _build(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.ca)
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif not self.check_hostname:
            ctx.check_hostname = False
        if self.cert:
            ctx.load_cert_chain(self.cert, keyfile=self.key)
        return ctx


# The context each TLS setting last built, with the signatures of its files then (TlsSettings.context).
_CONTEXTS: dict[TlsSettings, tuple[tuple, ssl.SSLContext]] = {}


def _signature(path: str | None) -> tuple[int, int, int] | None:
    """What tells a file's content changed without reading it: (modification time, size, inode)."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None  # the build reports the missing file
    return st.st_mtime_ns, st.st_size, st.st_ino


@dataclass(frozen=True)
class ConnectionSettings:
    """How to reach the source; the password is kept out of ``repr``."""

    host: str
    port: int
    user: str
    password: str
    tls: TlsSettings | None = None  # None: no TLS required (pymysql still prefers it when offered)
    read_timeout: float | None = None  # seconds a socket read (or write) may block; None: no limit

    def __repr__(self) -> str:
        return (f"ConnectionSettings(host={self.host!r}, port={self.port}, user={self.user!r}, password='***', "
                f"tls={self.tls!r}, read_timeout={self.read_timeout!r})")

    def pymysql_kwargs(self) -> dict:
        """Keyword arguments of ``pymysql.connect`` (also the binlog reader's ``connection_settings``)."""
        kwargs = {"host": self.host, "port": self.port, "user": self.user, "password": self.password}
        if self.tls is not None:
            kwargs["ssl"] = self.tls.context()  # required: pymysql refuses a server without TLS
        if self.read_timeout is not None:
            kwargs["read_timeout"] = kwargs["write_timeout"] = self.read_timeout
        return kwargs

    def connectorx_url(self, database: str) -> str:
        """The bulk reader's URL (user and password URL-encoded). connectorx 0.4 has no TLS for
        MySQL, so cdc_core/chunks/bulk_read.py never uses it when ``tls`` is set.

        ``prefer_socket=false``: by default the rust client, given a loopback host, asks the server
        for ``@@socket`` and reconnects through that Unix socket path on the local machine, which
        may be another server's (a source reached through an SSH tunnel or a port mapping on
        127.0.0.1, with a local MySQL listening at the usual socket path)."""
        return (f"mysql://{quote(self.user, safe='')}:{quote(self.password, safe='')}@{self.host}:{self.port}/"
                f"{quote(database, safe='')}?prefer_socket=false")


def connection_settings(cfg: BinlakeConfig) -> ConnectionSettings:
    """The source connection settings of a config."""
    s = cfg.source
    tls = None if s.ssl is None else TlsSettings(s.ssl.ca, s.ssl.cert, s.ssl.key, s.ssl.verify, s.ssl.check_hostname)
    return ConnectionSettings(s.host, s.port, s.user, s.password.get_secret_value(), tls)


class _Connection(pymysql.connections.Connection):
    """pymysql's connection with one TLS context per process for its "preferred" mode (no
    ``source.ssl``: TLS when the server offers it, unverified). pymysql builds that context for
    every connection, loading the system's CAs that an unverified context never reads: 25-30 ms
    of CPU per connection, a tenth of a 2M-row snapshot's start and tail (bench/README.md,
    "where the whole process's time goes"). A context given by ``source.ssl`` is built as before."""

    _preferred: ssl.SSLContext | None = None

    def _create_ssl_ctx(self, sslp):
        if not (isinstance(sslp, dict) and not sslp):
            return super()._create_ssl_ctx(sslp)
        if _Connection._preferred is None:  # two threads may both build it: either is the same
            _Connection._preferred = super()._create_ssl_ctx(sslp)
        return _Connection._preferred


def connect(conn: ConnectionSettings, **kwargs) -> pymysql.connections.Connection:
    """A control-plane connection: utf8mb4, autocommit, UTC session time zone."""
    return _Connection(**conn.pymysql_kwargs(), charset="utf8mb4", autocommit=True,
                       init_command="SET time_zone = '+00:00'", **kwargs)


def captured_tables(cfg: BinlakeConfig, cursor) -> list[str]:
    """Captured "db.table" names on the server, in name order."""
    return [t for t in list_tables(cursor) if cfg.source.captures(t)]


def describe_captured(cursor, names: list[str], source: SourceConfig) -> dict[str, TableSchema]:
    """:func:`describe_tables`, each schema as captured (``source.exclude_columns`` left out;
    ``NotCapturable`` when a table cannot be captured as configured)."""
    from cdc_core.source.capture import captured_schema  # column_filter needs the type mapping, loaded late

    return {n: captured_schema(schema, source) for n, schema in describe_tables(cursor, names).items()}


def describe_tables(cursor, names: list[str]) -> dict[str, TableSchema]:
    """Schemas of the tables ``names``; a table dropped since it was listed is left out (the
    binlog's DROP TABLE says what became of it)."""
    by_db: dict[str, list[str]] = {}
    for n in names:
        db, table = n.split(".", 1)
        by_db.setdefault(db, []).append(table)
    found = {f"{db}.{t}": s for db, tables in by_db.items() for t, s in describe_in(cursor, db, tables).items()}
    return {n: found[n] for n in names if n in found}
