"""A throwaway MariaDB server for tests, the demo and benchmarks.

Starts Debian's ``mariadbd`` on a free loopback port with a temporary data
directory and the binlog settings binlake needs, and stops it cleanly.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import pymysql

log = logging.getLogger(__name__)

MARIADBD_CANDIDATES = ("/usr/sbin/mariadbd", "/usr/sbin/mysqld")
ROOT_PASSWORD = "binlake-root"


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports on loopback, all bound at once: ports asked for one after another
    may repeat (the kernel can hand out a port again as soon as it is closed)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def _free_port() -> int:
    return free_ports(1)[0]


def _find_binary(name: str, candidates: tuple[str, ...] = ()) -> str:
    found = shutil.which(name) or next((c for c in candidates if os.path.exists(c)), None)
    if not found:
        raise RuntimeError(f"{name} not found: install Debian's mariadb-server (apt-get install mariadb-server)")
    return found


@dataclass
class LocalMariaDB:
    """A private mariadbd process; use as a context manager or call start()/stop()."""

    server_id: int = 1
    base_dir: Path | None = None
    port: int = field(default_factory=_free_port)
    extra_args: tuple[str, ...] = ()
    binlog: bool = True  # False: no --log-bin and no binlog flags (to test prerequisite checks)
    _proc: subprocess.Popen | None = None
    _owns_dir: bool = False

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def user(self) -> str:
        return "root"

    @property
    def password(self) -> str:
        return ROOT_PASSWORD

    @property
    def pid(self) -> int:
        """The running server's process id (bench/snapshot.py reads its CPU time)."""
        if self._proc is None:
            raise RuntimeError("mariadbd is not running")
        return self._proc.pid

    def start(self, timeout: float = 30.0) -> LocalMariaDB:
        """Initialise a data directory (first time only) and start the server."""
        if self.base_dir is None:
            self.base_dir = Path(tempfile.mkdtemp(prefix="binlake-mariadb-"))
            self._owns_dir = True
        datadir = self.base_dir / "data"
        user = ["--user=root"] if os.geteuid() == 0 else []
        if not datadir.exists():
            subprocess.run(
                [_find_binary("mariadb-install-db"), "--no-defaults", f"--datadir={datadir}",
                 "--auth-root-authentication-method=normal", "--skip-test-db", *user],
                check=True, capture_output=True,
            )
        # Temporary tables in a folder of this server's own: in a shared /tmp, another process's
        # cleanup may delete them under the server (seen: errors on delete, a crash on cleanup).
        tmpdir = self.base_dir / "tmp"
        tmpdir.mkdir(exist_ok=True)
        mariadbd = _find_binary("mariadbd", MARIADBD_CANDIDATES)
        binlog_args = [f"--log-bin={datadir / 'binlog'}", "--binlog-format=ROW", "--binlog-row-image=FULL",
                       "--binlog-row-metadata=FULL"] if self.binlog else []
        args = [
            mariadbd, "--no-defaults", f"--datadir={datadir}", f"--port={self.port}",
            "--bind-address=127.0.0.1", f"--socket={self.base_dir / 'mysqld.sock'}",
            f"--pid-file={self.base_dir / 'mysqld.pid'}", f"--log-error={self.base_dir / 'error.log'}",
            f"--tmpdir={tmpdir}",
            f"--server-id={self.server_id}",
            *binlog_args,
            "--character-set-server=utf8mb4", "--collation-server=utf8mb4_general_ci",
            "--innodb-buffer-pool-size=512M", "--innodb-flush-log-at-trx-commit=2",
            "--sync-binlog=0", "--max-allowed-packet=256M", "--skip-name-resolve",
            *user, *self.extra_args,
        ]
        self._proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_ready(timeout)
        self._set_root_password()
        log.info("MariaDB started on port %d (datadir %s)", self.port, datadir)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc and self._proc.poll() is not None:
                raise RuntimeError(f"mariadbd exited early; see {self.base_dir / 'error.log'}")
            for password in (self.password, ""):
                try:
                    pymysql.connect(host=self.host, port=self.port, user="root", password=password).close()
                    return
                except pymysql.err.OperationalError:
                    continue
            time.sleep(0.1)
        raise TimeoutError(f"mariadbd not ready after {timeout}s; see {self.base_dir / 'error.log'}")

    def _set_root_password(self) -> None:
        try:
            conn = pymysql.connect(host=self.host, port=self.port, user="root", password="")
        except pymysql.err.OperationalError:
            return  # already set on an earlier start of this data directory
        with conn, conn.cursor() as cur:
            for host in ("localhost", "127.0.0.1"):
                cur.execute(f"CREATE USER IF NOT EXISTS 'root'@'{host}'")
                cur.execute(f"ALTER USER 'root'@'{host}' IDENTIFIED BY %s", (self.password,))
                cur.execute(f"GRANT ALL ON *.* TO 'root'@'{host}' WITH GRANT OPTION")

    def connect(self, database: str | None = None, **kwargs) -> pymysql.connections.Connection:
        """A pymysql connection as root (utf8mb4, autocommit)."""
        return pymysql.connect(host=self.host, port=self.port, user=self.user, password=self.password,
                               database=database, charset="utf8mb4", autocommit=True, **kwargs)

    def stop(self, timeout: float = 30.0) -> None:
        """Shut the server down cleanly (SIGTERM), killing it if it does not stop in time."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def cleanup(self) -> None:
        """Stop the server and remove its data directory if this object created it."""
        self.stop()
        if self._owns_dir and self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> LocalMariaDB:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cleanup()
