"""A throwaway PostgreSQL server for tests: the storage of the Dagster instance a team runs
(dagster.production.yaml).

Starts Debian's PostgreSQL (package ``postgresql``: ``initdb`` and ``pg_ctl`` from
/usr/lib/postgresql/<version>/bin) on a free loopback port with a temporary data directory,
creates a password-protected user and database, and stops it cleanly. PostgreSQL refuses to
run as root: as root, its commands run as the user ``postgres`` the Debian package creates.
"""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from devtools.local_mariadb import _free_port

log = logging.getLogger(__name__)


def _bin_dir() -> Path:
    """Where Debian's PostgreSQL binaries are (the newest version installed), or its own PATH."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parent.parent.name))
    if not versions:
        raise RuntimeError("PostgreSQL not found: install Debian's postgresql (apt-get install postgresql)")
    return versions[-1].parent


@dataclass
class LocalPostgres:
    """A private PostgreSQL cluster; use as a context manager or call start()/stop()."""

    port: int = field(default_factory=_free_port)
    user: str = "dagster"
    password: str = "dagster-test-password"
    database: str = "dagster"
    base_dir: Path | None = None

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def pid(self) -> int | None:
        """The postmaster's pid while it runs."""
        pid_file = self.base_dir / "data" / "postmaster.pid" if self.base_dir else None
        return int(pid_file.read_text().split()[0]) if pid_file and pid_file.exists() else None

    def _run(self, *args: str) -> None:
        # As root, as the postgres user (initdb and postgres refuse root).
        as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*as_user, *args], check=True, capture_output=True, timeout=120)

    def start(self) -> LocalPostgres:
        """Initialise the cluster (user, password, database) and start it; stopped again if that fails."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> LocalPostgres:
        bin_dir = _bin_dir()
        self.base_dir = Path(tempfile.mkdtemp(prefix="binlake-postgres-"))
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(self.base_dir, owner.pw_uid, owner.pw_gid)
        pwfile = self.base_dir / "pwfile"
        pwfile.write_text(self.password)
        if os.geteuid() == 0:
            os.chown(pwfile, owner.pw_uid, owner.pw_gid)
        data = self.base_dir / "data"
        self._run(str(bin_dir / "initdb"), "-D", str(data), "-U", self.user, f"--pwfile={pwfile}",
                  "--auth-host=scram-sha-256", "--auth-local=peer", "-E", "UTF8", "--no-sync")
        pwfile.unlink()
        self._run(str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(self.base_dir / "postgres.log"), "-w",
                  "-o", f"-p {self.port} -k {self.base_dir} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
        import psycopg2  # dagster-postgres's driver (binlake[postgres])

        conn = psycopg2.connect(host=self.host, port=self.port, user=self.user, password=self.password,
                                dbname="postgres")
        try:
            conn.autocommit = True  # CREATE DATABASE runs outside a transaction
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{self.database}"')
        finally:
            conn.close()
        log.info("PostgreSQL started on port %d (data %s)", self.port, data)
        return self

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its directory."""
        if self.base_dir is None:
            return
        if self.pid is not None:
            self._run(str(_bin_dir() / "pg_ctl"), "-D", str(self.base_dir / "data"), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.base_dir, ignore_errors=True)
        self.base_dir = None

    def env(self) -> dict[str, str]:
        """The environment dagster.production.yaml reads its PostgreSQL settings from."""
        return {"DAGSTER_PG_HOST": self.host, "DAGSTER_PG_PORT": str(self.port), "DAGSTER_PG_DB": self.database,
                "DAGSTER_PG_USERNAME": self.user, "DAGSTER_PG_PASSWORD": self.password}

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
