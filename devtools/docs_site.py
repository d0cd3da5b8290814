"""Build hooks of the documentation site (``mkdocs.yml``: ``hooks``; ``make docs``): the repository's
Markdown as one checked site.

- Pages: the site is docs/ plus two pages made from files outside it, README.md as the home page
  (``index.md``) and bench/README.md as ``benchmarks.md``, so the front door and the benchmark
  reference are checked with the rest (``PAGES``).
- Links: a relative link in a page (inline, or a reference definition) is resolved against the
  page's own place in the repository (``docs/contracts.md`` from README.md, ``../bench/README.md``
  from docs/); one that lands on
  README.md, bench/README.md or a file under docs/ is rewritten to that page, anchor kept, and
  MkDocs validates it (``validation`` in mkdocs.yml: a missing page or anchor fails ``mkdocs build
  --strict``). Any other relative link (a source file, a file that does not exist) is left as it
  is, and MkDocs fails it as not found: pages name source files as text, which the next rule checks.
  A link in raw HTML (``<a href>``, ``<img src>``), which MkDocs does not validate, is a warning.
- Names: every repository path (``cdc_core/…/x.py``, ``tests/test_x.py``, ``bench/x.py``, a folder
  ``pipelines/stream/``) and every dotted module name (``pipelines.reconcile.rows``) a page mentions,
  in prose, code spans or code blocks, must exist; a missing one is a warning, an error under
  ``--strict``. Generated, git-ignored places (``IGNORED``) are not checked.

Tests: tests/test_docs.py builds the site and breaks each rule on purpose.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

log = logging.getLogger("mkdocs.hooks.docs_site")  # under "mkdocs": --strict counts its warnings

# repository file -> its page on the site (files under docs/ are pages under their own names)
PAGES = {"README.md": "index.md", "bench/README.md": "benchmarks.md"}
TOP = ("cdc_core", "pipelines", "resources", "orchestration", "devtools", "tests", "bench", "docs")
PACKAGES = ("cdc_core", "pipelines", "resources", "orchestration", "devtools")
IGNORED = ("bench/out/", "bench/.dlt-venv", "orchestration/defs/.local_defs_state")

_LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")
_REFERENCE = re.compile(r"^( {0,3}\[[^\]]+\]:\s*)(\S+)", re.M)  # [id]: target
_RAW_HTML_LINK = re.compile(r"<(?:a|img)\b[^>]*\b(?:href|src)=", re.I)
_PATH = re.compile(rf"(?<![\w./<$~-])((?:{'|'.join(TOP)})/[\w./-]*)")
_MODULE = re.compile(rf"(?<![\w./])((?:{'|'.join(PACKAGES)})(?:\.[A-Za-z_]\w*)+)")
_CHECKED_SUFFIXES = (".py", ".md", ".yaml", ".yml", ".toml", ".png", "/")


def _repo(config: MkDocsConfig) -> Path:
    return Path(config.config_file_path).resolve().parent


def on_files(files: Files, config: MkDocsConfig) -> Files:
    repo = _repo(config)
    for source, page in PAGES.items():
        files.append(File.generated(config, page, abs_src_path=str(repo / source)))
    return files


def _source(page: Page, repo: Path) -> str:
    """The page's file, relative to the repository root."""
    return Path(page.file.abs_src_path).resolve().relative_to(repo).as_posix()


def _site_page(repo_path: str) -> str | None:
    if repo_path in PAGES:
        return PAGES[repo_path]
    if repo_path.startswith("docs/"):
        return repo_path.removeprefix("docs/")
    return None


def _rewrite_link(target: str, source: str, page_uri: str) -> str:
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
        return target  # a URL, an anchor on the same page, an absolute path (MkDocs judges those)
    path, hash_, anchor = target.partition("#")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(source), path))
    site = _site_page(resolved)
    if site is None:
        return target  # not a page: left for MkDocs to report as not found
    return posixpath.relpath(site, posixpath.dirname(page_uri) or ".") + hash_ + anchor


def _exists(repo: Path, name: str) -> bool:
    return (repo / name).exists()


def _module_exists(repo: Path, dotted: str) -> bool:
    """``pkg.mod.attr``: the longest prefix naming a package or module must cover the package and
    every component until a module is reached (what follows a module is an attribute)."""
    parts = dotted.split(".")
    here = repo / parts[0]
    for part in parts[1:]:
        if (here / f"{part}.py").is_file():
            return True
        if not (here / part).is_dir():
            return False
        here = here / part
    return True


def missing_names(markdown: str, repo: Path) -> list[str]:
    """Repository paths and module names the text mentions that do not exist."""
    missing = []
    for m in _PATH.finditer(markdown):
        name = m.group(1).rstrip(".")
        if not name.endswith(_CHECKED_SUFFIXES) or name.startswith(IGNORED):
            continue
        if not _exists(repo, name):
            missing.append(name)
    for m in _MODULE.finditer(markdown):
        if not _module_exists(repo, m.group(1)):
            missing.append(m.group(1))
    return missing


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    repo = _repo(config)
    source = _source(page, repo)
    for name in missing_names(markdown, repo):
        log.warning(f"Doc file '{source}' names '{name}', which is not in the repository.")
    if _RAW_HTML_LINK.search(markdown):  # MkDocs validates Markdown links only
        log.warning(f"Doc file '{source}' links with raw HTML, which is not checked: use a Markdown link.")
    markdown = _LINK.sub(lambda m: m.group(1) + _rewrite_link(m.group(2), source, page.file.src_uri) + m.group(3),
                         markdown)
    return _REFERENCE.sub(lambda m: m.group(1) + _rewrite_link(m.group(2), source, page.file.src_uri), markdown)
