"""The source server's flavour: MariaDB, MySQL 8.0, or MySQL 8.4 and later, and everything
binlake says or reads differently on them. The rest of the code asks this module instead of
branching on the server.

Invariants (tests/test_flavour.py checks each against the answers the reference manuals give):
- A connection's flavour is detected once, from ``SELECT VERSION(), @@version_comment``, and
  kept for that connection (:func:`flavour_of`); a new connection detects it again (a failover
  may reach another server).
- MariaDB's answers are the statements, variables and privilege names binlake used before the
  seam existed, so nothing changes there.
- MySQL's statement names follow its renames: ``SHOW BINARY LOG STATUS`` from 8.2 (8.4 removed
  ``SHOW MASTER STATUS``), ``SHOW REPLICAS`` from 8.0.22 (8.4 removed ``SHOW SLAVE HOSTS``);
  ``SHOW BINARY LOGS`` and ``SHOW BINLOG EVENTS`` are the same everywhere. The rows they return
  have the same columns in the same order under either name.
- A server whose consistent snapshot reports its binlog position (``binlog_snapshot_file`` /
  ``binlog_snapshot_position``: MariaDB, and Percona Server's port of it) makes low watermarks
  visible that way; on MySQL the GTID-ownership wait does (cdc_core/offset/visibility.py).
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass

MARIADB = "mariadb"
MYSQL = "mysql"


@dataclass(frozen=True)
class Flavour:
    """What a source server is, and its names for what binlake asks of it."""

    product: str  # MARIADB or MYSQL
    version: tuple[int, int, int]
    version_text: str  # VERSION(), e.g. 10.11.19-MariaDB-0+deb12u1-log, 8.0.36, 8.4.3
    comment: str = ""  # @@version_comment, e.g. "MySQL Community Server - GPL", "Percona Server (GPL), ..."

    @classmethod
    def parse(cls, version_text: str, comment: str | None = "") -> Flavour:
        """The flavour of a server whose ``VERSION()`` is ``version_text``. MariaDB names itself
        in it (before 11.0 behind a ``5.5.5-`` prefix some clients add); anything else is MySQL
        (Aurora MySQL's may read ``8.0.mysql_aurora.3.05.2``: 8.0)."""
        text = str(version_text)
        mariadb = "mariadb" in text.lower()
        numbers = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text.removeprefix("5.5.5-"))
        version = tuple(int(n or 0) for n in numbers.groups()) if numbers else (0, 0, 0)
        return cls(MARIADB if mariadb else MYSQL, version, text, str(comment or ""))  # type: ignore[arg-type]

    @property
    def mariadb(self) -> bool:
        return self.product == MARIADB

    @property
    def percona(self) -> bool:
        """Percona Server for MySQL (its consistent snapshot reports a binlog position, as MariaDB's)."""
        return not self.mariadb and "percona" in self.comment.lower()

    def at_least(self, *version: int) -> bool:
        return self.version >= version

    def __str__(self) -> str:
        return f"{'MariaDB' if self.mariadb else 'Percona Server' if self.percona else 'MySQL'} {self.version_text}"

    # Statements ---------------------------------------------------------------------------------

    @property
    def binlog_status_sql(self) -> str:
        """The binlog end: File and Position (MySQL adds Executed_Gtid_Set)."""
        return "SHOW BINARY LOG STATUS" if not self.mariadb and self.at_least(8, 2) else "SHOW MASTER STATUS"

    @property
    def replicas_sql(self) -> str:
        """The replicas connected to the server: Server_id, Host, Port, ... in that order."""
        return "SHOW REPLICAS" if not self.mariadb and self.at_least(8, 0, 22) else "SHOW SLAVE HOSTS"

    binary_logs_sql = "SHOW BINARY LOGS"  # Log_name, File_size (both flavours, every version binlake reads)
    binlog_events_sql = "SHOW BINLOG EVENTS"  # Log_name, Pos, Event_type, Server_id, End_log_pos, Info

    # GTIDs --------------------------------------------------------------------------------------

    @property
    def gtid_position_variable(self) -> str:
        """The global variable naming what the binlog holds by GTID (cdc_core/offset/gtid.py):
        MariaDB's last GTID of each domain, MySQL's set of executed transactions."""
        return "gtid_binlog_pos" if self.mariadb else "gtid_executed"

    @property
    def gtid_purged_variable(self) -> str | None:
        """MySQL's set of executed transactions no binlog holds any more (MariaDB has none)."""
        return None if self.mariadb else "gtid_purged"

    # Privileges ---------------------------------------------------------------------------------

    stream_privilege = "REPLICATION SLAVE"  # the binlog stream (and SHOW BINLOG EVENTS on MySQL)

    @property
    def monitor_privilege(self) -> str:
        """What lets the user read the binlog end and list the binlogs (SHOW BINARY LOG STATUS /
        SHOW MASTER STATUS, SHOW BINARY LOGS): MariaDB 10.5 renamed it."""
        return "BINLOG MONITOR" if self.mariadb and self.at_least(10, 5) else "REPLICATION CLIENT"

    @property
    def replicas_privilege(self) -> str:
        """What lets the user list the replicas (binlake's server_id check; optional: without it the
        server refuses a second replica with the same id itself)."""
        if self.mariadb:
            return "REPLICATION MASTER ADMIN" if self.at_least(10, 5, 2) else "REPLICATION SLAVE"
        return "REPLICATION SLAVE"

    def privilege_names(self, privilege: str) -> tuple[str, ...]:
        """The names under which SHOW GRANTS may list ``privilege`` on this server (MariaDB 10.5+
        lists REPLICATION CLIENT, granted under its old name, as BINLOG MONITOR)."""
        if privilege == "BINLOG MONITOR":
            return ("BINLOG MONITOR", "REPLICATION CLIENT")
        return (privilege,)

    # Low watermarks -----------------------------------------------------------------------------

    @property
    def snapshot_position(self) -> bool:
        """Whether ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` reports the binlog position its
        read view matches (the ``binlog_snapshot_%`` status variables)."""
        return self.mariadb or self.percona


# Flavours detected, by connection: a connection reaches one server for its whole life.
_DETECTED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def flavour_of(cursor) -> Flavour:
    """The flavour of the server ``cursor``'s connection reaches, detected on first use."""
    conn = cursor.connection
    found = _DETECTED.get(conn)
    if found is None:
        cursor.execute("SELECT VERSION(), @@version_comment")
        found = _DETECTED[conn] = Flavour.parse(*cursor.fetchone())
    return found
