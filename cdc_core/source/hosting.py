"""Where the source runs: a server of its own, Amazon RDS, or Aurora MySQL. The managed ones
take their settings from parameter groups instead of ``SET GLOBAL`` and keep binlogs as long
as a procedure says, so ``binlake validate`` names what to change there.

Invariants (tests/test_validate_mysql.py, with answers as the RDS and Aurora user guides give them):
- RDS and Aurora are told by ``@@basedir`` (their servers run from ``/rdsdbbin/``), Aurora from
  RDS by ``AURORA_VERSION()``, a function only Aurora MySQL has.
- Binlog retention on RDS and Aurora is ``binlog retention hours`` of
  ``CALL mysql.rds_show_configuration``; NULL (the default) means binlogs are purged as soon as
  possible, which a stream that stops for a moment cannot survive: refused, naming the call
  that sets it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pymysql

from cdc_core.source.flavour import Flavour

SELF_MANAGED, RDS, AURORA = "self-managed", "rds", "aurora"

# Binlog retention shorter than this is reported: a large snapshot, then the stream, must find
# the binlog from the snapshot's lowest low watermark on (plus any time the stream is stopped).
MIN_RETENTION_HOURS = 24


@dataclass(frozen=True)
class Hosting:
    kind: str  # SELF_MANAGED, RDS or AURORA
    aurora_version: str | None = None

    @property
    def managed(self) -> bool:
        return self.kind != SELF_MANAGED

    def parameter_group(self, cluster_level: bool = False) -> str:
        """The console setting a server setting is changed in."""
        if self.kind == AURORA:
            return "the DB cluster parameter group" if cluster_level else "the DB (cluster) parameter group"
        return "the DB parameter group"


def hosting_of(cursor, flavour: Flavour) -> Hosting:
    """Where the server ``cursor`` reaches runs (see the module invariants)."""
    cursor.execute("SELECT @@basedir")
    basedir = str(cursor.fetchone()[0] or "")
    if not basedir.startswith("/rdsdbbin/"):
        return Hosting(SELF_MANAGED)
    if flavour.mariadb:
        return Hosting(RDS)
    try:
        cursor.execute("SELECT AURORA_VERSION()")
        return Hosting(AURORA, str(cursor.fetchone()[0]))
    except pymysql.err.MySQLError:  # RDS for MySQL: no such function
        return Hosting(RDS)


def retention_findings(cursor, hosting: Hosting) -> tuple[list[str], list[str]]:
    """(problems, warnings) about how long RDS / Aurora keep binlogs (see the module invariants)."""
    if not hosting.managed:
        return [], []
    cursor.execute("CALL mysql.rds_show_configuration")
    config = {str(r[0]).lower(): r[1] for r in cursor.fetchall()}
    hours = config.get("binlog retention hours")
    # 168 hours (7 days): RDS for MySQL's maximum; Aurora allows up to 2160
    call = f"CALL mysql.rds_set_configuration('binlog retention hours', {MIN_RETENTION_HOURS * 7});"
    if hours is None:
        return [f"binlog retention hours is NULL on {hosting.kind.upper()}: binlogs are purged as soon as "
                f"possible, before a stopped or lagging stream reads them; run: {call}"], []
    if int(hours) < MIN_RETENTION_HOURS:
        return [], [f"binlog retention hours is {hours} on {hosting.kind.upper()}: a snapshot longer than that, or "
                    f"a stream stopped that long, finds its binlogs purged; consider: {call}"]
    return [], []
