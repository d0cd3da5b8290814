"""How binlake reaches the source server: connection settings, control-plane
connections and the list of captured tables."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

import pymysql

from cdc_core.config import BinlakeConfig
from cdc_core.table_schema import TableSchema, describe_table, list_tables


@dataclass(frozen=True)
class ConnectionSettings:
    """How to reach the source; the password is kept out of ``repr``."""

    host: str
    port: int
    user: str
    password: str

    def __repr__(self) -> str:
        return f"ConnectionSettings(host={self.host!r}, port={self.port}, user={self.user!r}, password='***')"

    def pymysql_kwargs(self) -> dict:
        return {"host": self.host, "port": self.port, "user": self.user, "password": self.password}

    def connectorx_url(self, database: str) -> str:
        """The bulk reader's URL (user and password URL-encoded)."""
        return f"mysql://{quote(self.user, safe='')}:{quote(self.password, safe='')}@{self.host}:{self.port}/{database}"


def connection_settings(cfg: BinlakeConfig) -> ConnectionSettings:
    """The source connection settings of a config."""
    s = cfg.source
    return ConnectionSettings(s.host, s.port, s.user, s.password.get_secret_value())


def connect(conn: ConnectionSettings, **kwargs) -> pymysql.connections.Connection:
    """A control-plane connection: utf8mb4, autocommit, UTC session time zone."""
    return pymysql.connect(**conn.pymysql_kwargs(), charset="utf8mb4", autocommit=True,
                           init_command="SET time_zone = '+00:00'", **kwargs)


def captured_tables(cfg: BinlakeConfig, cursor) -> list[str]:
    """Captured "db.table" names on the server, in name order."""
    return [t for t in list_tables(cursor) if cfg.source.captures(t)]


def describe_tables(cursor, names: list[str]) -> dict[str, TableSchema]:
    """Schemas of the tables ``names``; a table dropped since it was listed is left out (the
    binlog's DROP TABLE says what became of it)."""
    schemas = {}
    for n in names:
        try:
            schemas[n] = describe_table(cursor, *n.split(".", 1))
        except LookupError:
            continue
    return schemas
