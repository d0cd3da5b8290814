"""The code location loads without MySQL: tables and columns come from the saved table
catalog (refreshed from the real MariaDB with ``dg utils refresh-defs-state``), never from
the source; ``dg check defs``, ``dg list defs`` and ``dagster definitions validate`` pass
with the source unreachable. Specs carry the column schema, chunk partitions, kinds,
``binlake/…`` metadata and each table's freshness policy."""

from __future__ import annotations

import gc
import json
import os
import shutil
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from dagster import AssetKey, Definitions

from orchestration.build import build_binlake_definitions
from pipelines.source_catalog import discover
from tests.helpers import write_config_file

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def closed_port() -> int:
    """A local port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unreachable(cfg):
    return cfg.model_copy(update={"source": cfg.source.model_copy(update={"port": closed_port()})})


def _tables(conn) -> None:
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, amount DECIMAL(12,2) NOT NULL, at DATETIME(3))")
        cur.execute("CREATE TABLE b (id BIGINT PRIMARY KEY, s VARCHAR(20))")


def test_definitions_load_from_the_catalog_with_mysql_down(db, make_config, tmp_path):
    name, conn = db
    _tables(conn)
    cfg = make_config(name, dagster={"table_freshness": {rf"{name}\.b": {"fail_after_seconds": 60}}})
    discover(cfg).write(tmp_path / "tables.json")
    path = write_config_file(unreachable(cfg), tmp_path / "binlake.yaml")
    defs = build_binlake_definitions(path, tmp_path / "tables.json")
    Definitions.validate_loadable(defs)
    specs = {s.key: s for s in defs.resolve_all_asset_specs()}
    assert set(specs) == {AssetKey([name, "a"]), AssetKey([name, "b"])}
    a = specs[AssetKey([name, "a"])]
    columns = {c.name: c for c in a.metadata["dagster/column_schema"].columns}
    assert list(columns) == ["id", "amount", "at", "_cdc_op", "_cdc_seq"]
    assert (columns["amount"].type, columns["amount"].description) == ("decimal(12,2)", "MySQL decimal(12,2)")
    assert columns["at"].type == "timestamp_ntz" and columns["id"].constraints.unique
    assert a.kinds == {"mysql", "delta", "spark"} and a.group_name == name
    assert a.metadata["binlake/primary_key"] == "id"
    assert a.partitions_def.name == f"binlake_chunks__{name}__a"
    assert a.freshness_policy.fail_window.to_timedelta() == timedelta(hours=1)  # dagster.freshness default
    assert specs[AssetKey([name, "b"])].freshness_policy.fail_window.to_timedelta() == timedelta(seconds=60)
    assert {j.name for j in defs.jobs} >= {"binlake_stream", "apply_schema_changes", "binlake_refresh_tables"}

    empty = build_binlake_definitions(path, tmp_path / "missing.json")  # no catalog yet: loads, no tables
    assert list(empty.resolve_all_asset_specs()) == []


def test_asset_metadata_names_each_table_mode_and_changelogs_are_assets(db, make_config, tmp_path):
    """``binlake/table_mode`` and ``binlake/metadata_columns`` on every table's spec, the mode's
    columns in its column schema; a table with a change feed has its changelog as an asset of
    its own, depending on it (docs/history.md)."""
    name, conn = db
    _tables(conn)
    cfg = make_config(name, sink={"metadata_columns": ["_cdc_ts"], "table_modes": {rf"{name}\.a": "history"},
                                  "change_feed": [rf"{name}\.a"]})
    discover(cfg).write(tmp_path / "tables.json")
    defs = build_binlake_definitions(write_config_file(unreachable(cfg), tmp_path / "binlake.yaml"),
                                     tmp_path / "tables.json")
    Definitions.validate_loadable(defs)
    specs = {s.key: s for s in defs.resolve_all_asset_specs()}
    a, b = specs[AssetKey([name, "a"])], specs[AssetKey([name, "b"])]
    assert (a.metadata["binlake/table_mode"], b.metadata["binlake/table_mode"]) == ("history", "current")
    assert a.metadata["binlake/metadata_columns"] == "_cdc_ts, _valid_from, _valid_to, _valid_to_seq, _is_current"
    assert b.metadata["binlake/metadata_columns"] == "_cdc_ts"
    assert [c.name for c in a.metadata["dagster/column_schema"].columns][-5:] == [
        "_cdc_ts", "_valid_from", "_valid_to", "_valid_to_seq", "_is_current"]
    feed = specs[AssetKey([name, "a__changes"])]
    assert feed.metadata["binlake/table_mode"] == "changelog" and {d.asset_key for d in feed.deps} == {a.key}
    assert AssetKey([name, "b__changes"]) not in specs


def test_definitions_are_frozen_and_a_rebuild_leaves_nothing_frozen_behind(db, make_config, tmp_path):
    """Building freezes what it built (the collector never walks the definitions again) and
    leaves the collector on; a rebuild in the same process (a reload, tests) first collects what
    of the earlier build is garbage by then, so rebuilding does not pile up frozen objects."""
    name, conn = db
    _tables(conn)
    cfg = make_config(name)
    discover(cfg).write(tmp_path / "tables.json")
    path = write_config_file(unreachable(cfg), tmp_path / "binlake.yaml")
    frozen = []
    for _ in range(4):
        defs = build_binlake_definitions(path, tmp_path / "tables.json")
        assert gc.isenabled()
        frozen.append(gc.get_freeze_count())
        defs.get_repository_def().get_all_jobs()
        del defs
    assert frozen[0] > 0
    # each build without the earlier one's garbage collected adds about 1,000 objects here
    assert frozen[3] < frozen[1] + 100, frozen


def _run(args: list[str], env: dict) -> str:
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_dg_and_dagster_cli_with_mysql_down(db, make_config, tmp_path):
    name, conn = db
    _tables(conn)
    cfg = make_config(name)
    env = dict(os.environ, VIRTUAL_ENV=str(BIN.parent), DAGSTER_HOME=str(tmp_path / "home"),
               BINLAKE_CONFIG=write_config_file(cfg, tmp_path / "up.yaml"))
    (tmp_path / "home").mkdir()
    state = ROOT / "orchestration" / "defs" / ".local_defs_state" / f"BinlakeComponent__{cfg.pipeline.name}__"
    try:
        _run([str(BIN / "dg"), "utils", "refresh-defs-state"], env)  # discovery against the real server
        assert json.loads((state / "state").read_text())["pipeline"] == cfg.pipeline.name
        env["BINLAKE_CONFIG"] = write_config_file(unreachable(cfg), tmp_path / "down.yaml")
        _run([str(BIN / "dg"), "check", "defs"], env)
        _run([str(BIN / "dagster"), "definitions", "validate", "-w", "workspace.yaml"], env)
        listed = json.loads(_run([str(BIN / "dg"), "list", "defs", "--json"], env))
        keys = {a["asset_key"] for a in listed["assets"]}
        assert keys == {f"{name}/a", f"{name}/b"}
    finally:
        shutil.rmtree(state, ignore_errors=True)
