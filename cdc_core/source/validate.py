"""Prerequisite checks for ``binlake validate``: connectivity, privileges, binlog
settings (cdc_core/source/server_settings.py, on RDS and Aurora cdc_core/source/hosting.py),
that every captured table exists, can be mapped (cdc_core/source/capture.py: excluded key
columns, column types) and chunked (cdc_core/chunks/planning.py: a table without any key is
read whole in one consistent snapshot, refused on a server that cannot tell its position),
and that routed tables can share their sinks (same key columns, compatible column types).

Privileges (docs/security.md, "Least privilege"; names per flavour from
cdc_core/source/flavour.py): SELECT on the captured tables (chunk reads, information_schema),
REPLICATION SLAVE (the binlog stream) and REPLICATION CLIENT, named BINLOG MONITOR since
MariaDB 10.5 (the binlog end for watermarks, SHOW BINARY LOGS). Nothing else: no SUPER, no
BACKUP_ADMIN (MySQL's low watermark reads ``@@GLOBAL.gtid_owned`` and a status counter, which
every user may read). On MySQL, privileges a user holds through roles are read with the
roles' grants (SHOW GRANTS ... USING).
"""

from __future__ import annotations

import os
import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path

import pymysql

from cdc_core.chunks.consistent_read import reports_snapshot_position
from cdc_core.chunks.planning import ChunkKeyError, choose_chunk_key
from cdc_core.config import BinlakeConfig
from cdc_core.routes import Router
from cdc_core.source import server_settings
from cdc_core.source.capture import NotCapturable, captured_schema
from cdc_core.source.connection import captured_tables, connect, connection_settings, describe_tables
from cdc_core.source.flavour import Flavour, flavour_of
from cdc_core.source.hosting import hosting_of, retention_findings


@dataclass
class Findings:
    """What validate found: problems (binlake cannot run as configured) and warnings (it can)."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def add(self, problems: list[str], warnings: list[str] = ()) -> None:
        self.problems += problems
        self.warnings += warnings


def findings(cfg: BinlakeConfig) -> Findings:
    """Every problem and warning, one line each; no problem when the source and the lake are ready."""
    found = Findings(_sink(cfg.sink.path))
    _source(cfg, found)
    return found


def check(cfg: BinlakeConfig) -> list[str]:
    """Every problem found, one line each; empty when the source and the lake are ready."""
    return findings(cfg).problems


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


def _source(cfg: BinlakeConfig, found: Findings) -> None:
    try:
        conn = connect(connection_settings(cfg), connect_timeout=10)
    except (ssl.SSLError, OSError) as e:  # source.ssl files that are not PEM certificates / keys
        found.add([f"source.ssl: cannot load the TLS files: {e}"])
        return
    except pymysql.err.OperationalError as e:
        found.add([connect_problem(cfg, e)])
        return
    except RuntimeError as e:  # pymysql without the cryptography package, for caching_sha2_password
        found.add([auth_problem(cfg, e)])
        return
    with conn, conn.cursor() as cur:
        flavour = flavour_of(cur)
        hosting = hosting_of(cur, flavour)
        found.add(_tls(cfg, cur))
        found.add(*_settings(cur, flavour, hosting))
        found.add(*retention_findings(cur, hosting))
        found.add(_privileges(cfg, cur, flavour))
        found.add(_tables(cfg, cur))


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
    if "sha2" in text or "public key" in text:
        return auth_problem(cfg, e)
    return f"source: cannot connect to {where}: {text}"


def auth_problem(cfg: BinlakeConfig, e: Exception) -> str:
    """Why MySQL 8's caching_sha2_password (or sha256_password) sign-in failed, and what to do.

    The first sign-in of an account after a server start is a full one: over TLS the password
    is sent as it is; without TLS pymysql asks the server for its RSA public key and encrypts
    the password with it, which needs the ``cryptography`` package (a binlake dependency) and a
    server that has RSA keys (caching_sha2_password_auto_generate_rsa_keys, the default)."""
    s = cfg.source
    return (f"source: {s.user!r} at {s.host}:{s.port} signs in with caching_sha2_password (MySQL 8's default) and "
            f"the full sign-in failed ({e.args[-1] if e.args else e}): set source.ssl so the password travels over "
            "TLS, or make sure the cryptography package is installed and the server has RSA keys "
            "(caching_sha2_password_auto_generate_rsa_keys=ON), or create the user WITH mysql_native_password "
            "(MySQL 8.0 only)")


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


def _settings(cur, flavour: Flavour, hosting) -> tuple[list[str], list[str]]:
    names = ", ".join(f"'{n}'" for n in server_settings.variable_names(flavour))
    cur.execute(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})")
    have = {str(k).lower(): str(v) for k, v in cur.fetchall()}
    return server_settings.findings(have, flavour, hosting)


def _grants(cur, flavour: Flavour) -> str:
    """The user's grants as one upper-case text, with those of its roles on MySQL."""
    cur.execute("SHOW GRANTS")
    lines = [r[0] for r in cur.fetchall()]
    roles = [m[1] for line in lines if (m := re.match(r"GRANT ((?:`[^`]*`@`[^`]*`(?:,\s*)?)+) TO ", line))]
    if roles and not flavour.mariadb:
        cur.execute(f"SHOW GRANTS FOR CURRENT_USER() USING {', '.join(roles)}")
        lines = [r[0] for r in cur.fetchall()]
    return " ".join(line.upper() for line in lines)


def _privileges(cfg: BinlakeConfig, cur, flavour: Flavour) -> list[str]:
    """Missing privileges, each line with the exact GRANT statement that adds them."""
    grants = _grants(cur, flavour)
    if re.search(r"GRANT ALL PRIVILEGES ON \*\.\*", grants):
        return []

    def has(privilege: str) -> bool:
        # Whole names only: REPLICATION SLAVE ADMIN is not REPLICATION SLAVE.
        return any(re.search(rf"\b{alias}\b(?! ADMIN)", grants) for alias in flavour.privilege_names(privilege))

    cur.execute("SELECT CURRENT_USER(), VERSION()")
    account, _ = cur.fetchone()
    user, _, host = account.rpartition("@")
    grantee = f"{_sql_string(user)}@{_sql_string(host)}"
    out = []
    missing = [p for p in (flavour.stream_privilege, flavour.monitor_privilege) if not has(p)]
    if missing:
        out.append(f"source user {grantee} lacks {' and '.join(missing)}; run: "
                   f"GRANT {', '.join(missing)} ON *.* TO {grantee};")
    if not has("SELECT"):
        targets = _select_targets(cfg.source.tables)
        out.append(f"source user {grantee} lacks SELECT on the captured tables; run: "
                   + " ".join(f"GRANT SELECT ON {t} TO {grantee};" for t in targets))
    return out


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
    described = describe_tables(cur, names)  # in bulk: a source of many tables is described in a few queries
    for name in (n for n in names if n in described):
        try:
            schema = schemas[name] = captured_schema(described[name], cfg.source)
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
