"""``binlake validate`` on MySQL 8.0 / 8.4, RDS and Aurora MySQL (cdc_core/source/validate.py,
server_settings.py, hosting.py), against tests/mysql_double.py. The settings and their values
are those of the MySQL 8.4 manual's "Binary Logging Options and Variables" (binlog_format,
binlog_row_image, binlog_row_metadata default MINIMAL, binlog_row_value_options PARTIAL_JSON,
binlog_transaction_compression, binlog_expire_logs_seconds default 2592000) and "Global
Transaction ID System Variables" (gtid_mode); RDS: "mysql.rds_show_configuration" and
"mysql.rds_set_configuration" of the Amazon RDS User Guide (binlog retention hours NULL by
default, at most 168); Aurora: "Setting up enhanced binlog for Aurora MySQL"
(aurora_enhanced_binlog), AURORA_VERSION() from "Checking Aurora MySQL versions". The table
checks on information_schema are MariaDB's tests' (tests/test_cli.py, test_types.py): here the
server-level checks alone."""

from __future__ import annotations

import pytest

from cdc_core.config import parse_config
from cdc_core.source import validate
from tests.mysql_double import MySqlDouble


def found(server: MySqlDouble, monkeypatch) -> validate.Findings:
    monkeypatch.setattr(validate, "connect", lambda *a, **k: server.connect())
    monkeypatch.setattr(validate, "_tables", lambda cfg, cur: [])
    cfg = parse_config({"pipeline": {"name": "p"}, "source": {"host": "db.example", "user": "binlake",
                                                               "password": "pw", "server_id": 4242,
                                                               "tables": [r"shop\..*"]},
                        "sink": {"path": "s3://bucket/lake"}})
    return validate.findings(cfg)


@pytest.mark.parametrize("version", ["8.0.36", "8.4.3"])
def test_a_ready_mysql_server_has_no_problem(version, monkeypatch):
    f = found(MySqlDouble(version=version), monkeypatch)
    assert f.problems == [] and f.warnings == []


@pytest.mark.parametrize("name,value,fix", [
    ("binlog_format", "MIXED", "SET PERSIST binlog_format = 'ROW'"),
    ("binlog_row_image", "MINIMAL", "SET PERSIST binlog_row_image = 'FULL'"),
    ("binlog_row_image", "NOBLOB", "SET PERSIST binlog_row_image = 'FULL'"),
    ("binlog_row_metadata", "MINIMAL", "SET PERSIST binlog_row_metadata = 'FULL'"),  # MySQL's default
    ("binlog_row_value_options", "PARTIAL_JSON", "SET PERSIST binlog_row_value_options = ''"),
    ("binlog_transaction_compression", "ON", "SET PERSIST binlog_transaction_compression = 'OFF'"),
    ("log_bin", "OFF", "start the server with --log-bin"),
])
def test_each_setting_binlake_cannot_read_is_refused_with_its_fix(name, value, fix, monkeypatch):
    f = found(MySqlDouble(variables={name: value}), monkeypatch)
    (problem,) = f.problems
    assert problem.startswith(f"server setting {name} is ") and fix in problem


def test_a_setting_older_servers_lack_is_no_problem(monkeypatch):
    server = MySqlDouble(version="8.0.19")
    for name in ("binlog_transaction_compression", "binlog_row_value_options"):
        del server.variables[name]
    assert found(server, monkeypatch).problems == []


def test_settings_binlake_decodes_are_not_refused(monkeypatch):
    """A row naming an event type is checked only while the binlog reader refuses that type
    (cdc_core/binlog/undecodable.py KNOWN): teaching the reader TRANSACTION_PAYLOAD lifts it."""
    from cdc_core.binlog import undecodable
    from cdc_core.source import server_settings

    monkeypatch.setattr(server_settings, "KNOWN", {k: v for k, v in undecodable.KNOWN.items() if k != 0x28})
    f = found(MySqlDouble(variables={"binlog_transaction_compression": "ON"}), monkeypatch)
    assert f.problems == []


def test_gtid_mode_off_and_short_expiry_are_reported_not_refused(monkeypatch):
    f = found(MySqlDouble(variables={"gtid_mode": "OFF", "binlog_expire_logs_seconds": "3600"}), monkeypatch)
    assert f.problems == []
    gtid, expiry = f.warnings
    assert "gtid_mode is OFF" in gtid and "fail over" in gtid and "gtid_mode=ON" in gtid
    assert "expire after 1 hours" in expiry


def test_privileges_per_flavour_and_through_roles(monkeypatch):
    f = found(MySqlDouble(version="8.4.3", grants=["GRANT SELECT ON `shop`.* TO `binlake`@`%`"]), monkeypatch)
    (problem,) = f.problems
    assert problem == ("source user 'binlake'@'%' lacks REPLICATION SLAVE and REPLICATION CLIENT; run: "
                       "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'binlake'@'%';")
    assert "BINLOG MONITOR" not in problem and "SUPER" not in problem
    via_role = MySqlDouble(version="8.0.36", grants=["GRANT USAGE ON *.* TO `binlake`@`%`",
                                                     "GRANT `cdc_reader`@`%` TO `binlake`@`%`"],
                           role_grants={"`cdc_reader`@`%`": [
                               "GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `cdc_reader`@`%`"]})
    assert found(via_role, monkeypatch).problems == []
    assert "SHOW GRANTS FOR CURRENT_USER() USING `cdc_reader`@`%`" in via_role.sent


def rds(**kw) -> MySqlDouble:
    return MySqlDouble(basedir="/rdsdbbin/mysql-8.0.35.R2/", **kw)


def test_rds_binlog_retention_null_is_refused_with_the_call_to_run(monkeypatch):
    f = found(rds(rds_configuration={"binlog retention hours": None, "source delay": "0"}), monkeypatch)
    (problem,) = f.problems
    assert "binlog retention hours is NULL on RDS" in problem
    assert "CALL mysql.rds_set_configuration('binlog retention hours', 168);" in problem
    short = found(rds(rds_configuration={"binlog retention hours": "12"}), monkeypatch)
    assert short.problems == [] and "binlog retention hours is 12" in short.warnings[0]
    assert found(rds(rds_configuration={"binlog retention hours": "168"}), monkeypatch).warnings == []


def test_rds_settings_name_the_parameter_group(monkeypatch):
    f = found(rds(rds_configuration={"binlog retention hours": "168"}, variables={"binlog_row_metadata": "MINIMAL",
                                                                                   "log_bin": "OFF"}), monkeypatch)
    log_bin, metadata = f.problems
    assert "automated backups" in log_bin
    assert "set binlog_row_metadata to FULL in the DB parameter group" in metadata and "SET" not in metadata


def test_aurora_is_told_from_rds_and_names_its_cluster_parameter_group(monkeypatch):
    server = MySqlDouble(version="8.0.mysql_aurora.3.05.2", basedir="/rdsdbbin/oscar-8.0.mysql_aurora.3.05.2/",
                         aurora_version="3.05.2", rds_configuration={"binlog retention hours": "24"},
                         variables={"binlog_format": "MIXED", "aurora_enhanced_binlog": "1"})
    f = found(server, monkeypatch)
    (problem,) = f.problems
    assert "binlog_format" in problem and "the DB cluster parameter group" in problem
    assert any("aurora_enhanced_binlog is 1" in w for w in f.warnings)
    null = MySqlDouble(version="8.0.28", basedir="/rdsdbbin/oscar/", aurora_version="3.02.0",
                       rds_configuration={"binlog retention hours": None})
    assert "on AURORA" in found(null, monkeypatch).problems[0]


def test_caching_sha2_sign_in_failure_says_what_to_do(monkeypatch):
    def refuse(*a, **k):
        raise RuntimeError("'cryptography' package is required for sha256_password or caching_sha2_password auth "
                           "methods")

    monkeypatch.setattr(validate, "connect", refuse)
    cfg = parse_config({"pipeline": {"name": "p"}, "source": {"host": "db", "user": "u", "password": "pw",
                                                               "server_id": 1, "tables": ["a\\..*"]},
                        "sink": {"path": "s3://b/l"}})
    (problem,) = validate.findings(cfg).problems
    assert "caching_sha2_password" in problem and "source.ssl" in problem and "cryptography" in problem
