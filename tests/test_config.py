"""Config loading (the configuration contract of docs/contracts.md): ``${VAR}`` substitution, unknown
keys and wrong types named by key, defaults, secrets kept out of errors and repr."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from cdc_core.config import BinlakeConfig, ConfigError, load_config, parse_config

PASSWORD = "Pw-zx9Q!kiwi-7731"  # distinctive: any leak shows up verbatim


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "binlake.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def _minimal(**source) -> dict:
    return {"pipeline": {"name": "p"}, "source": {"user": "cdc", "tables": [r"shop\..*"], **source}}


def _error(data: dict) -> str:
    with pytest.raises(ConfigError) as e:
        parse_config(data)
    return str(e.value)


def test_env_var_substitution(tmp_path, monkeypatch):
    monkeypatch.setenv("BINLAKE_T_PASSWORD", PASSWORD)
    monkeypatch.setenv("BINLAKE_T_HOST", "db.internal")
    monkeypatch.setenv("BINLAKE_T_PORT", "3307")
    path = _write(tmp_path, r"""
        pipeline: {name: shop_to_lake}
        source:
          host: ${BINLAKE_T_HOST}
          port: ${BINLAKE_T_PORT}
          user: cdc
          password: ${BINLAKE_T_PASSWORD}
          tables: ['shop\..*']
        sink: {path: 's3://bucket/${BINLAKE_T_HOST}/lake'}
    """)
    cfg = load_config(path)
    assert cfg.source.host == "db.internal"
    assert cfg.source.port == 3307  # a substituted string still becomes an int
    assert cfg.source.password.get_secret_value() == PASSWORD
    assert cfg.sink.path == "s3://bucket/db.internal/lake"  # substitution inside a longer string


def test_missing_env_var_names_key_and_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("BINLAKE_T_UNSET", raising=False)
    path = _write(tmp_path, r"""
        pipeline: {name: p}
        source: {user: cdc, password: '${BINLAKE_T_UNSET}', tables: ['shop\..*']}
    """)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert "source.password" in str(e.value)
    assert "BINLAKE_T_UNSET" in str(e.value)


def test_unknown_key_is_named():
    data = _minimal()
    data["source"]["snapshott"] = {"chunk_size": 10}
    msg = _error(data)
    assert "source.snapshott" in msg and "unknown key" in msg


def test_unknown_top_level_and_nested_keys_are_named():
    data = _minimal(startup={"mode": "initial", "fille": "binlog.000001"})
    data["streams"] = {}
    msg = _error(data)
    assert "source.startup.fille" in msg and "streams" in msg


def test_wrong_type_is_named():
    assert "source.port" in _error(_minimal(port="abc"))
    assert "pipeline.parallelism" in _error({**_minimal(), "pipeline": {"name": "p", "parallelism": "many"}})
    assert "stream.max_batch_rows" in _error({**_minimal(), "stream": {"max_batch_rows": [1]}})


def test_out_of_range_and_bad_choice_are_named():
    assert "source.port" in _error(_minimal(port=70000))
    assert "pipeline.schema_change_behavior" in _error(
        {**_minimal(), "pipeline": {"name": "p", "schema_change_behavior": "yolo"}})
    assert "source.startup.mode" in _error(_minimal(startup={"mode": "whenever"}))


def test_missing_required_key_is_named():
    data = _minimal()
    del data["source"]["user"]
    assert "source.user" in _error(data)


def test_defaults_match_design():
    cfg = parse_config(_minimal())
    assert isinstance(cfg, BinlakeConfig)
    assert cfg.pipeline.parallelism == 4
    assert cfg.pipeline.schema_change_behavior == "lenient"
    assert cfg.source.host == "127.0.0.1" and cfg.source.port == 3306
    assert cfg.source.server_id == 5400 and cfg.source.server_time_zone == "UTC"
    assert cfg.source.exclude_tables == []
    assert cfg.source.startup.mode == "initial"
    assert cfg.source.snapshot.chunk_size == 8096 and cfg.source.snapshot.chunk_key_columns == {}
    assert cfg.sink.path == "./lake" and cfg.sink.storage_options == {}
    assert cfg.stream.max_batch_rows == 10000
    assert cfg.stream.max_batch_seconds == 1.0
    assert cfg.stream.heartbeat_seconds == 30
    assert cfg.routes == []


def test_design_example_parses(tmp_path, monkeypatch):
    """A compact config in the format of docs/contracts.md (tests/test_docs.py loads the reference itself)."""
    monkeypatch.setenv("MYSQL_PASSWORD", PASSWORD)
    path = _write(tmp_path, r"""
        pipeline:
          name: shop_to_lake
          parallelism: 4
          schema_change_behavior: lenient
        source:
          host: 127.0.0.1
          port: 3306
          user: cdc
          password: ${MYSQL_PASSWORD}
          server_id: 5400
          server_time_zone: UTC
          tables: ['shop\..*']
          exclude_tables: []
          startup:
            mode: initial
          snapshot:
            chunk_size: 8096
            chunk_key_columns: {}
        sink:
          path: ./lake
          storage_options: {}
        stream:
          max_batch_rows: 10000
          max_batch_seconds: 1.0
          heartbeat_seconds: 30
        routes: [{source: 'shop\.user_\d+', sink: shop.user}]
    """)
    cfg = load_config(path)
    assert cfg.pipeline.name == "shop_to_lake"
    assert cfg.routes[0].sink == "shop.user"
    assert cfg.source.captures("shop.orders") and not cfg.source.captures("shopx.orders")


def test_password_never_in_error_or_repr(tmp_path, monkeypatch):
    # A wrong-typed field next to the password: the error must name it without echoing values.
    monkeypatch.setenv("BINLAKE_T_PASSWORD", PASSWORD)
    path = _write(tmp_path, r"""
        pipeline: {name: p}
        source: {user: cdc, password: '${BINLAKE_T_PASSWORD}', port: "abc", server_id: 'x', tables: ['shop\..*']}
    """)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert "source.port" in str(e.value) and "source.server_id" in str(e.value)
    assert PASSWORD not in str(e.value) and PASSWORD not in repr(e.value)

    # A password of the wrong type: named, value not shown.
    msg = _error(_minimal(password=["x", PASSWORD], port="abc"))
    assert "source.password" in msg and PASSWORD not in msg

    # A valid config: the password is not in repr/str of any level.
    cfg = parse_config(_minimal(password=PASSWORD))
    for shown in (repr(cfg), str(cfg), repr(cfg.source), str(cfg.source), repr(cfg.source.password),
                  str(cfg.source.password), cfg.model_dump_json()):
        assert PASSWORD not in shown


def test_invalid_table_regex_is_rejected():
    msg = _error(_minimal(tables=[r"shop\.(orders"]))
    assert "source.tables" in msg and "invalid regex" in msg
    assert "source.exclude_tables" in _error(_minimal(exclude_tables=["[a-"]))


def test_tables_are_full_matches():
    cfg = parse_config(_minimal(tables=[r"shop\..*", r"crm\.users"], exclude_tables=[r"shop\.tmp_.*"]))
    assert cfg.source.captures("shop.orders")
    assert cfg.source.captures("crm.users") and not cfg.source.captures("crm.users_old")
    assert not cfg.source.captures("shop.tmp_1")
    assert not cfg.source.captures("xshop.orders")


def test_config_file_problems(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(_write(tmp_path, "pipeline: [unclosed\n"))
    with pytest.raises(ConfigError, match="mapping"):
        load_config(_write(tmp_path, "- just\n- a list\n"))
