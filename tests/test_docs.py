"""The documentation holds what it claims.

- The site (mkdocs.yml; devtools/docs_site.py) builds with ``mkdocs build --strict``: every
  link, anchor, navigation entry and repository path of every page (README.md and
  bench/README.md included) resolves, and every page is in the navigation.
- Those checks catch what they are said to: one build of a copy with each kind of breakage
  fails, naming every one.
- docs/architecture.md maps the tree: every module of cdc_core, pipelines, resources,
  orchestration and devtools is in its module map and the map names no other, every package
  folder has its section; and the packages import in the layers the page states.
- docs/contracts.md's configuration reference names every key the configuration accepts, and
  only those, and loads as a configuration.
- No tracked file refers to an issue number instead of saying what it means.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from cdc_core.config import BinlakeConfig, load_config

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("cdc_core", "pipelines", "resources", "orchestration", "devtools")


def _build(root: Path, site: Path) -> subprocess.CompletedProcess:
    # never with -v: MkDocs 1.6.1 skips the anchor validation when its log level is DEBUG
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"), "-d", str(site)],
        cwd=root, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def test_site_builds_strict(tmp_path):
    built = _build(REPO, tmp_path / "site")
    assert built.returncode == 0, built.stdout + built.stderr
    for page in ("index.html", "benchmarks/index.html", "architecture/index.html", "dagster/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
    # the Dagster page shows its screenshots
    assert "screenshots/asset-graph.png" in (tmp_path / "site" / "dagster" / "index.html").read_text()


def test_every_screenshot_is_shown():
    pages = "\n".join(p.read_text() for p in (REPO / "docs").glob("*.md"))
    unshown = [p.name for p in sorted((REPO / "docs" / "screenshots").glob("*.png"))
               if f"screenshots/{p.name})" not in pages]
    assert not unshown, f"screenshots no page shows: {unshown}"


def _copy_for_breaking(root: Path) -> None:
    """The repository's documentation copied into ``root`` (to be edited), everything else linked."""
    copied = {"mkdocs.yml", "README.md", "docs", "bench"}
    for entry in REPO.iterdir():
        if entry.name in copied:
            if entry.is_dir():
                shutil.copytree(entry, root / entry.name, ignore=shutil.ignore_patterns("out", ".dlt-venv"))
            else:
                shutil.copy2(entry, root / entry.name)
        elif entry.name not in (".git", ".venv", "site"):
            (root / entry.name).symlink_to(entry)


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + "\n" + text + "\n")


# (file edited, text appended, what the failed build must say)
BREAKAGES = (
    ("docs/stream.md", "[a missing page](no-such-page.md)", "'no-such-page.md'"),
    ("docs/stream.md", "[a missing anchor](snapshot.md#no-such-heading)", "#no-such-heading"),
    ("docs/stream.md", "[a missing anchor here](#no-such-anchor-here)", "#no-such-anchor-here"),
    ("docs/stream.md", "[a source file](../cdc_core/errors.py)", "'../cdc_core/errors.py'"),
    ("docs/stream.md", "[a missing repository file](../cdc_core/no_such_module.py)", "'../cdc_core/no_such_module.py'"),
    ("docs/stream.md", "See `cdc_core/binlog/no_such.py` for it.", "'cdc_core/binlog/no_such.py'"),
    ("docs/stream.md", "In prose: tests/test_no_such_thing.py.", "'tests/test_no_such_thing.py'"),
    ("docs/stream.md", "The module `pipelines.no_such_module.run`.", "'pipelines.no_such_module.run'"),
    ("docs/stream.md", "```\n.venv/bin/python bench/no_such_bench.py\n```", "'bench/no_such_bench.py'"),
    ("README.md", "[a missing doc](docs/no-such-doc.md)", "'docs/no-such-doc.md'"),
    ("README.md", "[a missing anchor](docs/contracts.md#no-such-section)", "#no-such-section"),
    ("bench/README.md", "[a missing anchor](../docs/snapshot.md#no-such-step)", "#no-such-step"),
    ("docs/stream.md", "![a missing image](screenshots/no-such-shot.png)", "screenshots/no-such-shot.png"),
    ("docs/stream.md", "[a reference][gone]\n\n[gone]: no-such-reference.md", "'no-such-reference.md'"),
    ("docs/stream.md", "[absolute](/contracts.md)", "absolute link '/contracts.md'"),
    ("docs/routes.md", '<a href="no-such-html-target.md">raw HTML</a>', "'docs/routes.md' links with raw HTML"),
    ("docs/orphan.md", "# A page in no navigation", "orphan.md"),
    ("mkdocs.yml", "  - Gone: no-such-nav-page.md", "no-such-nav-page.md"),
)


def test_the_checks_catch_each_breakage(tmp_path):
    """What the build is said to catch, broken on purpose, all in one copy: the build fails and
    names every breakage (a check that stopped working would let its line through)."""
    root = tmp_path / "repo"
    root.mkdir()
    _copy_for_breaking(root)
    _append(root / "README.md", "[a reference][good]\n\n[good]: docs/contracts.md#command-line")
    for file, text, _ in BREAKAGES:
        path = root / file
        if path.exists():
            _append(path, text)
        else:
            path.write_text(text + "\n")
    built = _build(root, tmp_path / "site")
    out = built.stdout + built.stderr
    assert built.returncode != 0, out
    warnings = []  # each warning with its continuation lines (the pages missing from the navigation)
    for line in out.splitlines():
        if line.startswith("WARNING"):
            warnings.append(line)
        elif line.startswith(" ") and warnings:
            warnings[-1] += "\n" + line
    for file, text, said in BREAKAGES:
        assert any(said in line for line in warnings), f"{file}: {text!r} not reported:\n{out}"
    # and no false alarm: a reference-style link from README.md to a page's heading is resolved
    assert not any("command-line" in line for line in warnings), out


def _section(text: str, heading: str) -> str:
    """The text under ``heading`` (a level-2 heading), up to the next level-2 heading."""
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def _modules() -> set[str]:
    return {p.relative_to(REPO).as_posix() for top in PACKAGES for p in (REPO / top).rglob("*.py")
            if p.name != "__init__.py" and "__pycache__" not in p.parts}


def _package_folders() -> set[str]:
    return {p.parent.relative_to(REPO).as_posix() + "/" for top in PACKAGES
            for p in (REPO / top).rglob("__init__.py") if "__pycache__" not in p.parts}


def test_module_map_matches_the_tree():
    page = (REPO / "docs" / "architecture.md").read_text()
    rows = [line for line in _section(page, "## Module map").splitlines() if line.startswith("| `")]
    mapped = [re.match(r"\| `([^`]+)`", row).group(1) for row in rows]
    assert len(mapped) == len(set(mapped)), "a module is mapped twice"
    missing, unknown = _modules() - set(mapped), set(mapped) - _modules()
    assert not missing, f"modules missing from docs/architecture.md's module map: {sorted(missing)}"
    assert not unknown, f"docs/architecture.md's module map names modules that do not exist: {sorted(unknown)}"


def test_every_package_folder_has_its_section():
    folders = set(re.findall(r"^### (\S+/)$", _section((REPO / "docs" / "architecture.md").read_text(),
                                                         "## Folders"), re.M))
    assert folders == _package_folders(), (
        f"missing: {sorted(_package_folders() - folders)}; no such folder: {sorted(folders - _package_folders())}")


# What each package may import (docs/architecture.md, Folders): the layers, and the frameworks kept out.
FORBIDDEN = {
    "cdc_core": {"pipelines", "resources", "orchestration", "devtools", "pyspark", "dagster", "dagster_pyspark",
                 "deltalake"},
    "pipelines": {"resources", "orchestration", "devtools", "dagster", "dagster_pyspark"},
    "resources": {"orchestration", "devtools"},
    "orchestration": {"devtools"},
}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_packages_import_in_layers(package):
    wrong = {p.relative_to(REPO).as_posix(): sorted(_imports(p) & FORBIDDEN[package])
             for p in (REPO / package).rglob("*.py") if "__pycache__" not in p.parts}
    assert not {k: v for k, v in wrong.items() if v}


def _model_of(annotation) -> type[BaseModel] | None:
    """The sub-model a field holds (itself, optional, or a list of them); None for values and maps."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, list):
        models = [m for m in map(_model_of, typing.get_args(annotation)) if m is not None]
        return models[0] if models else None
    return None


def _accepted(model: type[BaseModel], prefix: str = "") -> set[str]:
    keys = set()
    for name, field in model.model_fields.items():
        keys.add(prefix + name)
        if (sub := _model_of(field.annotation)) is not None:
            keys |= _accepted(sub, f"{prefix}{name}.")
    return keys


def _documented(doc: dict, model: type[BaseModel] | None, prefix: str = "") -> set[str]:
    keys = set()
    for name, value in doc.items():
        keys.add(prefix + name)
        field = model.model_fields.get(name) if model else None
        sub = _model_of(field.annotation) if field else None
        for item in (value if isinstance(value, list) else [value]):
            if sub is not None and isinstance(item, dict):
                keys |= _documented(item, sub, f"{prefix}{name}.")
    return keys


def _reference_yaml() -> str:
    section = _section((REPO / "docs" / "contracts.md").read_text(), "## Configuration file")
    return re.search(r"```yaml\n(.*?)```", section, re.S).group(1)


def test_configuration_reference_names_every_key():
    documented = _documented(yaml.safe_load(_reference_yaml()), BinlakeConfig)
    accepted = _accepted(BinlakeConfig)
    assert not accepted - documented, f"keys missing from docs/contracts.md: {sorted(accepted - documented)}"
    assert not documented - accepted, f"docs/contracts.md names unknown keys: {sorted(documented - accepted)}"


def test_configuration_reference_loads(tmp_path, monkeypatch):
    """The reference is a configuration binlake accepts, as written (its CA file made to exist)."""
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    monkeypatch.setenv("MYSQL_PASSWORD", "not-a-secret")
    path = tmp_path / "binlake.yaml"
    path.write_text(_reference_yaml().replace("/etc/binlake/ca.pem", str(ca)))
    cfg = load_config(path)
    assert cfg.pipeline.name == "shop_to_lake" and cfg.source.ssl is not None


ISSUE_REFERENCE = re.compile(r"\bissue ?\d+|\bwave \d", re.I)


def test_no_issue_numbers():
    try:
        tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    found = []
    for name in filter(None, tracked.decode().split("\0")):
        path = REPO / name
        if not path.is_file() or path.suffix in (".png", ".jar"):
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if ISSUE_REFERENCE.search(line):
                found.append(f"{name}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
