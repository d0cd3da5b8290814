"""A MySQL 8.0 / 8.4 server (and RDS / Aurora MySQL) as binlake's statements see it: a
connection and cursor double that answers each statement binlake sends as the reference
manuals say the server does. No MySQL server can run here (MariaDB only), so the MySQL side of
the flavour seam, the GTID sets, the low watermark and ``validate`` are tested against it.

Each answer names the manual page it follows:
- SELECT VERSION(), @@version_comment: MySQL 8.0 manual 14.15 "Information Functions" (VERSION()
  "8.0.36", or "8.0.36-log" style suffixes) and 7.1.8 "Server System Variables" (version_comment).
- SHOW BINARY LOG STATUS (added in 8.2.0) / SHOW MASTER STATUS (removed in 8.4, "no longer
  supported"): 15.7.7.1 / 15.7.7.23: columns File, Position, Binlog_Do_DB, Binlog_Ignore_DB,
  Executed_Gtid_Set; REPLICATION CLIENT needed.
- SHOW REPLICAS (8.0.22+) / SHOW SLAVE HOSTS (removed in 8.4): 15.7.7.33: Server_Id, Host, Port,
  Source_Id, Replica_UUID; needs REPLICATION SLAVE.
- SHOW BINARY LOGS: 15.7.7.2: Log_name, File_size, Encrypted; needs REPLICATION CLIENT.
- @@GLOBAL.gtid_executed, gtid_purged, gtid_owned, gtid_mode: 19.1.6.5 "Global Transaction ID
  System Variables" (gtid_owned: the GTIDs in use with the IDs of the threads owning them,
  printed by Owned_gtids::to_string as ``uuid:gno#thread``); MariaDB's @@gtid_binlog_pos is
  unknown to MySQL (error 1193, ER_UNKNOWN_SYSTEM_VARIABLE).
- Ongoing_anonymous_transaction_count: 7.1.10 "Server Status Variables".
- START TRANSACTION WITH CONSISTENT SNAPSHOT: 15.3.1; MySQL reports no binlog_snapshot_%
  status variables (MariaDB's and Percona Server's do).
- CALL mysql.rds_show_configuration: Amazon RDS User Guide, "mysql.rds_show_configuration"
  (rows name, value, description; ``binlog retention hours`` NULL by default).
- AURORA_VERSION(): Aurora User Guide, "Checking Aurora MySQL versions"; on MySQL error 1305
  (ER_SP_DOES_NOT_EXIST). @@basedir on RDS and Aurora: /rdsdbbin/...
- A statement the server does not have: error 1064 (ER_PARSE_ERROR).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pymysql

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def error(code: int, message: str) -> pymysql.err.MySQLError:
    """The exception pymysql raises for the server's error ``code`` (its own mapping)."""
    return pymysql.err.error_map.get(code, pymysql.err.OperationalError)(code, message)


def _scripted(value) -> Callable[[], object]:
    """An answer: a value, or an iterator whose next item each call takes (its last one repeats)."""
    if isinstance(value, Iterator):
        last = [None]

        def step():
            last[0] = next(value, last[0])
            return last[0]
        return step
    return lambda: value


@dataclass
class MySqlDouble:
    """One server's state; ``connect()`` opens connections to it. Every statement is logged in ``sent``."""

    version: str = "8.0.36"
    comment: str = "MySQL Community Server - GPL"
    variables: dict[str, object] = field(default_factory=dict)  # global system variables
    status: dict[str, object] = field(default_factory=dict)  # global status variables
    grants: list[str] = field(default_factory=lambda: [
        "GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `binlake`@`%`"])
    role_grants: dict[str, list[str]] = field(default_factory=dict)  # SHOW GRANTS ... USING <roles>
    account: str = "binlake@%"
    binlogs: list[tuple[str, int]] = field(default_factory=lambda: [("binlog.000001", 180), ("binlog.000002", 4711)])
    replicas: list[tuple[int, str]] = field(default_factory=list)
    rds_configuration: dict[str, object] | None = None  # RDS and Aurora: mysql.rds_show_configuration
    basedir: str = "/usr/"
    aurora_version: str | None = None
    owned: object = ""  # @@GLOBAL.gtid_owned: a value or an iterator of values
    anonymous: object = 0  # Ongoing_anonymous_transaction_count: likewise
    sent: list[str] = field(default_factory=list)

    def __post_init__(self):
        defaults = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL",
                    "binlog_row_metadata": "FULL", "binlog_row_value_options": "",
                    "binlog_transaction_compression": "OFF", "gtid_mode": "ON", "enforce_gtid_consistency": "ON",
                    "binlog_expire_logs_seconds": "2592000", "server_id": "1", "gtid_executed": f"{UUID}:1-57",
                    "gtid_purged": f"{UUID}:1-9", "version_comment": self.comment}
        self.variables = {**defaults, **self.variables}
        self._owned, self._anonymous = _scripted(self.owned), _scripted(self.anonymous)

    @property
    def minor(self) -> tuple[int, ...]:
        return tuple(int(n) for n in re.match(r"(\d+)\.(\d+)\.(\d+)", self.version).groups())

    def connect(self) -> FakeConnection:
        return FakeConnection(self)

    def _has(self, privilege: str) -> bool:
        text = " ".join(self.grants).upper()
        return "ALL PRIVILEGES" in text or privilege in text

    def answer(self, sql: str, args) -> tuple[list[tuple], list[str]]:
        """(rows, column names) of ``sql``, or raises the server's error."""
        self.sent.append(sql)
        s = " ".join(sql.split())
        u = s.upper()
        if u == "SELECT VERSION(), @@VERSION_COMMENT":
            return [(self.version, self.comment)], ["VERSION()", "@@version_comment"]
        if u in ("SHOW BINARY LOG STATUS", "SHOW MASTER STATUS"):
            if (u == "SHOW BINARY LOG STATUS" and self.minor < (8, 2)) or (u == "SHOW MASTER STATUS"
                                                                           and self.minor >= (8, 4)):
                raise error(1064, f"You have an error in your SQL syntax near '{s.split()[1]}'")
            if not self._has("REPLICATION CLIENT"):
                raise error(1227, "Access denied; you need (at least one of) the SUPER, REPLICATION CLIENT "
                                  "privilege(s) for this operation")
            if self.variables["log_bin"] != "ON":
                return [], ["File", "Position", "Binlog_Do_DB", "Binlog_Ignore_DB", "Executed_Gtid_Set"]
            name, size = self.binlogs[-1]
            return [(name, size, "", "", self.variables["gtid_executed"])], ["File", "Position"]
        if u in ("SHOW REPLICAS", "SHOW SLAVE HOSTS"):
            if (u == "SHOW REPLICAS" and self.minor < (8, 0, 22)) or (u == "SHOW SLAVE HOSTS"
                                                                      and self.minor >= (8, 4)):
                raise error(1064, "You have an error in your SQL syntax")
            if not self._has("REPLICATION SLAVE"):
                raise error(1227, "Access denied; you need (at least one of) the REPLICATION SLAVE privilege(s)")
            return [(sid, host, 3306, 1, UUID) for sid, host in self.replicas], ["Server_Id", "Host"]
        if u == "SHOW BINARY LOGS":
            return [(n, size, "No") for n, size in self.binlogs], ["Log_name", "File_size", "Encrypted"]
        if m := re.fullmatch(r"SELECT @@(?:GLOBAL\.)?(\w+)", s, re.I):
            name = m[1].lower()
            if name == "gtid_owned":
                return [(self._owned(),)], [name]
            if name == "basedir":
                return [(self.basedir,)], [name]
            if name not in self.variables:
                raise error(1193, f"Unknown system variable '{name}'")
            return [(self.variables[name],)], [name]
        if u.startswith("SHOW GLOBAL STATUS LIKE"):
            wanted = re.search(r"'(.*)'", s)[1].replace("\\_", "_")
            if wanted == "Ongoing_anonymous_transaction_count":
                return [(wanted, str(self._anonymous()))], ["Variable_name", "Value"]
            return ([(wanted, str(self.status[wanted]))] if wanted in self.status else []), ["Variable_name", "Value"]
        if u.startswith("SHOW GLOBAL VARIABLES WHERE VARIABLE_NAME IN"):
            names = re.findall(r"'(\w+)'", s)
            return [(n, self.variables[n]) for n in names if n in self.variables], ["Variable_name", "Value"]
        if u in ("START TRANSACTION WITH CONSISTENT SNAPSHOT", "COMMIT"):
            return [], []
        if u.startswith("SHOW STATUS LIKE 'BINLOG"):
            return [], ["Variable_name", "Value"]  # MySQL has no binlog_snapshot_% status
        if u == "SHOW GRANTS":
            return [(g,) for g in self.grants], ["Grants"]
        if m := re.fullmatch(r"SHOW GRANTS FOR CURRENT_USER\(\) USING (.*)", s, re.I):
            roles = [r.strip() for r in m[1].split(",")]
            return [(g,) for g in self.grants + [g for r in roles for g in self.role_grants.get(r, [])]], ["Grants"]
        if u == "SELECT CURRENT_USER(), VERSION()":
            return [(self.account, self.version)], ["CURRENT_USER()", "VERSION()"]
        if u == "CALL MYSQL.RDS_SHOW_CONFIGURATION":
            if self.rds_configuration is None:
                raise error(1305, "PROCEDURE mysql.rds_show_configuration does not exist")
            return [(k, v, "") for k, v in self.rds_configuration.items()], ["name", "value", "description"]
        if u == "SELECT AURORA_VERSION()":
            if self.aurora_version is None:
                raise error(1305, "FUNCTION aurora_version does not exist")
            return [(self.aurora_version,)], ["AURORA_VERSION()"]
        raise AssertionError(f"the MySQL double has no answer for {sql!r}")


class FakeConnection:
    """A pymysql connection to a :class:`MySqlDouble` (what binlake's control code uses of it)."""

    def __init__(self, server: MySqlDouble):
        self.server = server
        self.open = True

    def cursor(self) -> FakeCursor:
        return FakeCursor(self)

    def escape(self, value) -> str:
        return pymysql.converters.escape_item(value, "utf8mb4")

    def close(self) -> None:
        self.open = False

    def __enter__(self) -> FakeConnection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class FakeCursor:
    def __init__(self, connection: FakeConnection):
        self.connection = connection
        self._rows: list[tuple] = []
        self.description = None

    def execute(self, sql: str, args=None) -> int:
        rows, names = self.connection.server.answer(sql, args)
        self._rows = list(rows)
        self.description = [(n,) for n in names]
        return len(rows)

    def fetchone(self):
        return self._rows.pop(0) if self._rows else None

    def fetchall(self):
        rows, self._rows = self._rows, []
        return rows

    def __enter__(self) -> FakeCursor:
        return self

    def __exit__(self, *exc) -> None:
        pass
