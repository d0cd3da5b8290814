"""binlake as a user installs it: the wheel ``python -m build`` makes (from its sdist), installed
without extras into a fresh virtualenv of each Python the classifiers name, runs
``binlake validate``, ``snapshot`` and ``stream --until now`` of a small table from a folder
outside the repository; Delta then equals MySQL row by row, read with deltalake and with a reader
of the Delta log and Parquet files of its own. An import the product makes that pyproject.toml
does not declare fails here, as does a file the product reads that the wheel does not carry.

binlake is known here only by its console script and its distribution files: no module of the
product is imported, so module paths can change without this test noticing.

The virtualenvs lie outside the checkout (inside it, product code that looks for files upward
from its own would find the repository's): under CI (``CI`` set) in the session's temporary
folder, made anew; elsewhere in ``~/.cache/binlake-install-test/<checkout>/py<X.Y>-<wheel sha256>``,
kept. The same sources make the same wheel (SOURCE_DATE_EPOCH fixes its timestamps), so a rerun
without changes reuses them and a changed wheel replaces them. pip's download cache serves the
dependencies. A supported Python missing on the machine skips its test, and fails it under CI.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from deltalake import DeltaTable

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "binlake-install-test" / (
    f"{ROOT.name}-{hashlib.sha256(str(ROOT).encode()).hexdigest()[:8]}")  # one per checkout: none removes another's
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
PACKAGES = ("cdc_core", "pipelines", "resources", "orchestration")  # the product, as the wheel holds it
SUPPORTED = [c.rsplit(" :: ", 1)[1] for c in PROJECT["classifiers"]
             if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
PASSWORD_VAR = "BINLAKE_INSTALL_TEST_PASSWORD"
COLUMNS = ["id", "label", "price", "seen"]


@dataclass(frozen=True)
class Dists:
    wheel: Path
    sdist: Path


@dataclass(frozen=True)
class PlainInstall:
    python: str  # X.Y
    bin: Path  # the virtualenv's bin/


def _run(cmd: list, **kw) -> subprocess.CompletedProcess:
    cmd = [str(c) for c in cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def user_env(**extra: str) -> dict[str, str]:
    """This environment without what points Python at other code (PYTHONPATH to a checkout,
    another virtualenv, the tests' Spark workers' interpreter)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYSPARK_", "VIRTUAL_ENV"))}
    return {**env, **extra}


def find_python(version: str) -> str | None:
    """An interpreter of ``version``: this one, ``pythonX.Y`` on PATH, or a pyenv version
    (pyenv's shims run only the versions pyenv has selected, so its folder is searched too)."""
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates = [sys.executable, shutil.which(f"python{version}"),
                  *sorted(pyenv.glob(f"versions/{version}.*/bin/python{version}"), reverse=True)]
    check = f"import sys, venv; sys.exit('%d.%d' % sys.version_info[:2] != {version!r})"
    for c in filter(None, candidates):
        if subprocess.run([str(c), "-c", check], capture_output=True, env=user_env()).returncode == 0:
            return str(c)
    return None


@pytest.fixture(scope="session")
def dists(tmp_path_factory) -> Dists:
    """The wheel and sdist of this checkout, built as a release would be."""
    out = tmp_path_factory.mktemp("dist")
    # 1980-01-01 for every file's time: the same sources make the same wheel (the venvs' key)
    _run([sys.executable, "-m", "build", "--outdir", out, ROOT], env={**os.environ, "SOURCE_DATE_EPOCH": "315532800"},
         timeout=600)
    (wheel,), (sdist,) = out.glob("*.whl"), out.glob("*.tar.gz")
    return Dists(wheel, sdist)


@pytest.fixture(scope="session")
def venvs(tmp_path_factory) -> Path:
    """Where the virtualenvs are made: anew under CI, else the checkout's cache."""
    return tmp_path_factory.mktemp("venvs") if os.environ.get("CI") else CACHE


@pytest.fixture(scope="module", params=SUPPORTED)
def plain_install(request, dists, venvs) -> PlainInstall:
    """A virtualenv of one supported Python with the wheel alone installed (no extras)."""
    version = request.param
    python = find_python(version)
    if python is None:
        missing = f"Python {version} (a classifier) is not on this machine"
        (pytest.fail if os.environ.get("CI") else pytest.skip)(missing)
    venv = venvs / f"py{version}-{hashlib.sha256(dists.wheel.read_bytes()).hexdigest()[:16]}"
    if not (venv / ".installed").exists():
        for old in venvs.glob(f"py{version}-*"):  # an older wheel's, or one cut short
            shutil.rmtree(old)
        _run([python, "-m", "venv", venv], env=user_env(), timeout=300)
        # --no-compile: byte-compiling every installed module was 40% of the install's time; the
        # commands compile what they import
        _run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile",
              dists.wheel], env=user_env(), timeout=1800)
        (venv / ".installed").touch()
    return PlainInstall(version, venv / "bin")


def test_wheel_and_sdist(dists):
    """twine accepts both; the wheel holds the product packages, each of their files, and
    nothing else; the sdist holds the sources the wheel is built from."""
    _run([sys.executable, "-m", "twine", "check", "--strict", dists.wheel, dists.sdist], timeout=120)
    with zipfile.ZipFile(dists.wheel) as whl:
        names = set(whl.namelist())
    dist_info = f"binlake-{PROJECT['version']}.dist-info"
    assert {n.split("/")[0] for n in names} == {*PACKAGES, dist_info}
    product = {p.relative_to(ROOT).as_posix() for pkg in PACKAGES for p in (ROOT / pkg).rglob("*")
               if p.suffix in (".py", ".yaml")  # not caches, nor Dagster's .local_defs_state
               and not any(part == "__pycache__" or part.startswith(".") for part in p.relative_to(ROOT).parts)}
    assert "orchestration/defs/binlake/defs.yaml" in product
    assert product <= names, f"files the wheel lacks: {sorted(product - names)}"
    with tarfile.open(dists.sdist) as sdist:
        top = f"binlake-{PROJECT['version']}/"
        in_sdist = {m.name.removeprefix(top) for m in sdist.getmembers()}
    assert product | {"pyproject.toml", "README.md"} <= in_sdist


def test_plain_install_snapshot_and_stream(plain_install, dists, mariadb, db, tmp_path):
    """The console script of a plain install: --version, validate, snapshot, changes, stream
    --until now; Delta equals MySQL (values and _cdc_op) by deltalake and by the log read here."""
    assert not tmp_path.is_relative_to(ROOT) and not plain_install.bin.is_relative_to(ROOT)
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY, label VARCHAR(40), price DECIMAL(10,2), seen DATETIME(3))")
        cur.executemany("INSERT INTO items VALUES (%s, %s, %s, %s)",
                        [(i, f"item {i} ✓", Decimal(i) / 4, f"2024-0{1 + i % 9}-1{i % 10} 12:34:56.{i:03d}")
                         for i in range(1, 201)])
    lake = tmp_path / "lake"
    config = tmp_path / "binlake.yaml"
    config.write_text(yaml.safe_dump({
        "pipeline": {"name": f"install_{name}", "parallelism": 2},
        "source": {"host": mariadb.host, "port": mariadb.port, "user": "root", "password": f"${{{PASSWORD_VAR}}}",
                   "server_id": 7200 + 10 * SUPPORTED.index(plain_install.python), "tables": [rf"{name}\.items"],
                   "snapshot": {"chunk_size": 50}},
        "sink": {"path": str(lake)},
    }))
    env = user_env(**{PASSWORD_VAR: mariadb.password, "COLUMNS": "200"})

    def binlake(*args: str) -> str:
        return _run([plain_install.bin / "binlake", *args], cwd=tmp_path, env=env, timeout=600).stdout

    wheel_version = dists.wheel.name.split("-")[1]
    assert wheel_version == PROJECT["version"]
    assert binlake("--version") == f"binlake {wheel_version}\n"
    assert "ready for binlake" in binlake("validate", "-c", str(config))
    assert "match" in binlake("snapshot", "-c", str(config))
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO items VALUES (%s, %s, %s, NULL)",
                        [(i, f"new {i} é", Decimal("0.01") * i) for i in range(201, 211)])
        cur.execute("UPDATE items SET price = price + 1, label = CONCAT(label, ' →') WHERE id BETWEEN 20 AND 29")
        cur.execute("UPDATE items SET seen = NULL WHERE id = 30")
        cur.execute("DELETE FROM items WHERE id BETWEEN 100 AND 109 OR id = 210")
    assert "stopped: reached" in binlake("stream", "--until", "now", "-c", str(config))

    with conn.cursor() as cur:
        cur.execute(f"SELECT {', '.join(COLUMNS)} FROM items ORDER BY id")
        mysql = [tuple(r) for r in cur.fetchall()]
    assert len(mysql) == 200 - 10 + 10 - 1
    ops = {i: "u" if 20 <= i <= 30 else "c" if i > 200 else "r" for i, *_ in mysql}
    table = lake / name / "items"
    by_deltalake = DeltaTable(str(table)).to_pyarrow_table(columns=[*COLUMNS, "_cdc_op"])
    for rows in (by_deltalake.to_pylist(), read_delta_log(table, [*COLUMNS, "_cdc_op"])):
        rows = sorted(rows, key=lambda r: r["id"])
        assert [tuple(r[c] for c in COLUMNS) for r in rows] == mysql
        assert {r["id"]: r["_cdc_op"] for r in rows} == ops


def read_delta_log(table: Path, columns: list[str]) -> list[dict]:
    """The rows of a local Delta table without delta-rs: its JSON commits replayed to the live
    files (add, remove), those read with pyarrow. Enough for an unpartitioned table without
    checkpoints or deletion vectors, which it asserts."""
    log = table / "_delta_log"
    assert not list(log.glob("*.checkpoint*")), "a checkpoint: more than this reader replays"
    live: dict[str, dict] = {}
    for commit in sorted(log.glob("*.json")):
        for action in map(json.loads, commit.read_text().splitlines()):
            if "add" in action:
                live[action["add"]["path"]] = action["add"]
            elif "remove" in action:
                live.pop(action["remove"]["path"])
    assert all(not a.get("partitionValues") and not a.get("deletionVector") for a in live.values())
    files = [pq.read_table(table / unquote(path), columns=columns) for path in live]
    return pa.concat_tables(files, promote_options="permissive").to_pylist()
