"""Prerequisite checks for ``binlake validate``: connectivity, privileges, binlog
settings, that every captured table exists, can be mapped (cdc_core/source/capture.py:
excluded key columns, column types) and chunked (cdc_core/chunks/planning.py: a table
without any key is read whole in one consistent snapshot, refused on a server that cannot
tell its position), and that routed tables can share their sinks (same key columns,
compatible column types)."""

from __future__ import annotations

import os
import re
import ssl
from pathlib import Path

import pymysql

from cdc_core.chunks.consistent_read import reports_snapshot_position
from cdc_core.chunks.planning import ChunkKeyError, choose_chunk_key
from cdc_core.config import BinlakeConfig
from cdc_core.routes import Router
from cdc_core.schema.table import describe_table
from cdc_core.source.capture import NotCapturable, captured_schema
from cdc_core.source.connection import captured_tables, connect, connection_settings

REQUIRED_SETTINGS = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL", "binlog_row_metadata": "FULL"}
# What the source user needs (docs/security.md, "Least privilege"): SELECT on the captured tables (chunk
# reads, information_schema), REPLICATION SLAVE (the binlog stream) and REPLICATION CLIENT,
# named BINLOG MONITOR since MariaDB 10.5 (SHOW MASTER STATUS for watermarks, SHOW BINARY LOGS).
_GLOBAL_PRIVILEGES = ("REPLICATION SLAVE", "REPLICATION CLIENT")
_PRIVILEGE_ALIASES = {"REPLICATION CLIENT": ("REPLICATION CLIENT", "BINLOG MONITOR")}


def check(cfg: BinlakeConfig) -> list[str]:
    """Every problem found, one line each; empty when the source and the lake are ready."""
    return _sink(cfg.sink.path) + _source(cfg)


def _sink(path: str) -> list[str]:
    """A local sink path must be (or be creatable as) a writable directory; object stores are
    checked when written."""
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", path) and not path.lower().startswith("file://"):
        return []
    p = Path(path[len("file://"):] if path.lower().startswith("file://") else path).absolute()
    existing = next(a for a in (p, *p.parents) if a.exists())
    if not existing.is_dir():
        return [f"sink.path {path} is not writable: {existing} is not a directory"]
    if not os.access(existing, os.W_OK | os.X_OK):
        return [f"sink.path {path} is not writable: no write permission on {existing} (or a read-only file system)"]
    return []


def _source(cfg: BinlakeConfig) -> list[str]:
    try:
        conn = connect(connection_settings(cfg), connect_timeout=10)
    except (ssl.SSLError, OSError) as e:  # source.ssl files that are not PEM certificates / keys
        return [f"source.ssl: cannot load the TLS files: {e}"]
    except pymysql.err.OperationalError as e:
        return [connect_problem(cfg, e)]
    problems: list[str] = []
    with conn, conn.cursor() as cur:
        problems += _tls(cfg, cur)
        problems += _settings(cur)
        problems += _privileges(cfg, cur)
        problems += _tables(cfg, cur)
    return problems


def connect_problem(cfg: BinlakeConfig, e: pymysql.err.OperationalError) -> str:
    """One line saying why a connection to the source failed and which keys to check."""
    s = cfg.source
    code, text = e.args[0], str(e.args[1] if len(e.args) > 1 else e)
    where = f"{s.host}:{s.port}"
    if code == 1045:
        return f"source: access denied for user {s.user!r} at {where} (check source.user and source.password)"
    tls = re.search(r"\[SSL(?:: [A-Z_]+)?\] (.*?)(?: \(_ssl\.c:\d+\))?\)?$", text)
    if tls or code == 2026:
        reason = tls.group(1) if tls else text
        return f"source: TLS to {where} failed: {reason} (check source.ssl: ca, verify, check_hostname)"
    return f"source: cannot connect to {where}: {text}"


def _tls(cfg: BinlakeConfig, cur) -> list[str]:
    """A user whose grants require TLS needs source.ssl: without it, binlake's bulk reads would
    connect in the clear and be refused (and nothing would check the server's certificate)."""
    if cfg.source.ssl is not None:
        return []
    cur.execute("SHOW GRANTS")
    required = re.search(r"\bREQUIRE (SSL|X509|ISSUER|SUBJECT|CIPHER)\b", " ".join(r[0] for r in cur.fetchall()))
    if not required:
        return []
    return [f"source: user {cfg.source.user!r} is created REQUIRE {required.group(1)}: set source.ssl "
            "(ca: the CA of the server's certificate; cert and key for X509) so every connection uses verified TLS"]


def _settings(cur) -> list[str]:
    cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format', 'binlog_row_image', "
                "'binlog_row_metadata', 'log_bin_compress')")
    have = {k.lower(): str(v).upper() for k, v in cur.fetchall()}
    out = []
    if have.get("log_bin_compress") == "ON":  # MariaDB only (cdc_core/binlog/undecodable.py: COMPRESSED_EVENTS)
        out.append("server setting log_bin_compress is ON: binlake cannot decode compressed binlog events "
                   "(SET GLOBAL log_bin_compress = 'OFF')")
    for name, want in REQUIRED_SETTINGS.items():
        got = have.get(name)
        if got != want:
            hint = "start the server with --log-bin" if name == "log_bin" else f"SET GLOBAL {name} = '{want}'"
            out.append(f"server setting {name} is {got or 'unset'}, binlake needs {want} ({hint})")
    return out


def _privileges(cfg: BinlakeConfig, cur) -> list[str]:
    """Missing privileges, each line with the exact GRANT statement that adds them."""
    cur.execute("SHOW GRANTS")
    grants = " ".join(r[0].upper() for r in cur.fetchall())
    if re.search(r"GRANT ALL PRIVILEGES ON \*\.\*", grants):
        return []

    def has(privilege: str) -> bool:
        # Whole names only: REPLICATION SLAVE ADMIN is not REPLICATION SLAVE.
        return any(re.search(rf"\b{alias}\b(?! ADMIN)", grants) for alias in _PRIVILEGE_ALIASES.get(privilege,
                                                                                                    (privilege,)))

    cur.execute("SELECT CURRENT_USER(), VERSION()")
    account, version = cur.fetchone()
    user, _, host = account.rpartition("@")
    grantee = f"{_sql_string(user)}@{_sql_string(host)}"
    out = []
    missing = [_privilege_name(p, version) for p in _GLOBAL_PRIVILEGES if not has(p)]
    if missing:
        out.append(f"source user {grantee} lacks {' and '.join(missing)}; run: "
                   f"GRANT {', '.join(missing)} ON *.* TO {grantee};")
    if not has("SELECT"):
        targets = _select_targets(cfg.source.tables)
        out.append(f"source user {grantee} lacks SELECT on the captured tables; run: "
                   + " ".join(f"GRANT SELECT ON {t} TO {grantee};" for t in targets))
    return out


def _privilege_name(privilege: str, version: str) -> str:
    """The server's own name of a privilege: REPLICATION CLIENT is BINLOG MONITOR on MariaDB 10.5+."""
    m = re.match(r"(\d+)\.(\d+)", version)
    if privilege == "REPLICATION CLIENT" and "MariaDB" in version and m and (int(m[1]), int(m[2])) >= (10, 5):
        return "BINLOG MONITOR"
    return privilege


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def _select_targets(patterns: list[str]) -> list[str]:
    """``db.*`` for each capture regex whose database part is a literal name, else ``*.*``."""
    targets = []
    for p in patterns:
        m = re.fullmatch(r"((?:[^\\.^$*+?()\[\]{}|]|\\.)+)\\\.(.*)", p)
        if m is None:
            return ["*.*"]
        db = re.sub(r"\\(.)", r"\1", m.group(1))
        target = "`" + db.replace("`", "``") + "`.*"
        if target not in targets:
            targets.append(target)
    return targets


def _tables(cfg: BinlakeConfig, cur) -> list[str]:
    names = captured_tables(cfg, cur)
    if not names:
        return [f"source.tables: no table on the server matches {cfg.source.tables}"]
    out = []
    schemas = {}
    for name in names:
        try:
            schema = schemas[name] = captured_schema(describe_table(cur, *name.split(".", 1)), cfg.source)
        except NotCapturable as e:
            out += e.problems
            continue
        try:
            choose_chunk_key(cur, schema, cfg.source.snapshot.chunk_key_columns,
                             lambda: reports_snapshot_position(cur))
        except ChunkKeyError as e:
            out.append(str(e))
    for configured in cfg.source.snapshot.chunk_key_columns:
        if configured not in names:
            out.append(f"source.snapshot.chunk_key_columns: {configured!r} is not a captured table")
    return out + Router(cfg.routes).problems(schemas)
