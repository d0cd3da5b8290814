"""The server settings binlake needs, as a table: each setting, the values that work, the
flavours that have it, what goes wrong otherwise and how to change it (``SET`` on a server of
one's own, the parameter group on RDS and Aurora).

Invariants (tests/test_validate_mysql.py with answers as the MySQL 8.0 / 8.4 manuals give
them, tests/test_cli.py and tests/test_compressed_binlog.py on MariaDB):
- Every setting that makes the server write an event binlake cannot decode, or rows it would
  get wrong, is refused by name with its fix: binlog off, a format other than ROW, row images
  or table-map metadata not FULL, MariaDB's ``log_bin_compress``, MySQL's
  ``binlog_transaction_compression`` and ``binlog_row_value_options=PARTIAL_JSON``.
- A setting whose events binlake could decode would not be refused: a row with an
  ``event_type`` is checked only while that type is in cdc_core/binlog/undecodable.py's
  ``KNOWN`` (the binlog reader's list of what it refuses), so teaching the reader a type
  lifts the refusal here with no other change.
- A setting a server version lacks (``binlog_row_value_options`` before MySQL 8.0.3,
  ``binlog_transaction_compression`` before 8.0.20, ``log_bin_compress`` on MySQL) is no problem.
- Reported, not refused: MySQL's ``gtid_mode`` when not ON (failover by GTID needs it, and the
  low watermark's proof then waits for a moment without anonymous transactions in flight,
  cdc_core/offset/visibility.py), and binlog expiry shorter than a day.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdc_core.binlog.undecodable import KNOWN
from cdc_core.source.flavour import MARIADB, MYSQL, Flavour
from cdc_core.source.hosting import MIN_RETENTION_HOURS, Hosting


@dataclass(frozen=True)
class Setting:
    """One server setting binlake depends on."""

    name: str
    wanted: str  # the value to set
    why: str  # what binlake gets wrong otherwise
    products: tuple[str, ...] = (MARIADB, MYSQL)
    accepted: tuple[str, ...] = ()  # values that work (default: ``wanted`` alone)
    absent_ok: bool = False  # a server without the variable writes no such events
    event_type: int | None = None  # checked only while binlake cannot decode this event type
    cluster_level: bool = False  # Aurora: set in the DB cluster parameter group

    def ok(self, value: str | None) -> bool:
        if value is None:
            return self.absent_ok
        return value.upper() in {v.upper() for v in (self.accepted or (self.wanted,))}

    def fix(self, flavour: Flavour, hosting: Hosting) -> str:
        """How to change it where the server runs."""
        if hosting.managed:
            if self.name == "log_bin":
                return ("RDS: turn on automated backups (backup retention period above 0), which turns on the binlog"
                        if hosting.kind == "rds" else
                        f"Aurora: set binlog_format to ROW in {hosting.parameter_group(True)} and reboot the writer")
            where = hosting.parameter_group(self.cluster_level)
            return f"set {self.name} to {self.wanted or 'an empty value'} in {where}"
        if self.name == "log_bin":
            return "start the server with --log-bin"
        verb = "SET GLOBAL" if flavour.mariadb else "SET PERSIST"
        return f"{verb} {self.name} = '{self.wanted}'"


SETTINGS = (
    Setting("log_bin", "ON", "binlake reads the binary log"),
    Setting("binlog_format", "ROW", "statement-based events carry no row images", cluster_level=True),
    Setting("binlog_row_image", "FULL", "updates and deletes must carry every column"),
    Setting("binlog_row_metadata", "FULL", "table maps must carry column names and types"),
    Setting("log_bin_compress", "OFF", "compressed binlog events cannot be decoded", products=(MARIADB,),
            absent_ok=True, event_type=0xA9),
    Setting("binlog_transaction_compression", "OFF", "compressed transactions (TRANSACTION_PAYLOAD events) cannot "
            "be decoded", products=(MYSQL,), absent_ok=True, event_type=0x28),
    Setting("binlog_row_value_options", "", "partial JSON updates carry only the changed parts of a JSON value",
            products=(MYSQL,), absent_ok=True, event_type=0x27),
)

# What validate reads besides the table's settings.
REPORTED = ("gtid_mode", "binlog_expire_logs_seconds", "expire_logs_days", "aurora_enhanced_binlog")


def variable_names(flavour: Flavour) -> list[str]:
    """The global variables :func:`findings` needs from a server of ``flavour``."""
    return [s.name for s in SETTINGS if flavour.product in s.products] + list(REPORTED)


def findings(have: dict[str, str], flavour: Flavour, hosting: Hosting) -> tuple[list[str], list[str]]:
    """(problems, warnings) of the server's global variables ``have`` (lower-case names)."""
    problems = []
    for s in SETTINGS:
        if flavour.product not in s.products or (s.event_type is not None and s.event_type not in KNOWN):
            continue
        got = have.get(s.name)
        if not s.ok(got):
            shown = "unset" if got is None else repr(got) if got == "" else got
            problems.append(f"server setting {s.name} is {shown}, binlake needs {s.wanted or repr('')} ({s.why}): "
                            f"{s.fix(flavour, hosting)}")
    warnings = []
    if not flavour.mariadb and (mode := have.get("gtid_mode", "OFF")).upper() != "ON":
        warnings.append(f"server setting gtid_mode is {mode}: binlake works without GTIDs, but cannot fail over to "
                        "another server by them, and each chunk's low watermark waits for a moment with no "
                        "anonymous transaction between binlog write and commit, which a server under sustained "
                        "writes may not give (the chunk then fails and is retried); gtid_mode=ON avoids both")
    if (seconds := _expiry_seconds(have)) and seconds < MIN_RETENTION_HOURS * 3600 and not hosting.managed:
        warnings.append(f"binlogs expire after {seconds / 3600:g} hours (binlog_expire_logs_seconds / "
                        "expire_logs_days): a snapshot or a stopped stream longer than that finds them purged; keep "
                        f"them at least {MIN_RETENTION_HOURS} hours")
    if str(have.get("aurora_enhanced_binlog", "0")) == "1":
        warnings.append("aurora_enhanced_binlog is 1: the low watermark's proof (cdc_core/offset/visibility.py) is "
                        "of community MySQL's commit order, not checked on Aurora's enhanced binlog")
    return problems, warnings


def _expiry_seconds(have: dict[str, str]) -> float:
    """Seconds after which the server purges binlogs; 0 when never."""
    seconds = float(have.get("binlog_expire_logs_seconds") or 0)
    days = float(have.get("expire_logs_days") or 0)
    return seconds or days * 86400
