"""Recorded MySQL 8.0 binlog bytes (tests/mysql_binlogs/, provenance in SOURCES.md) against the values their
sources state, decoded by python-mysql-replication from bytes (tests/binlog_bytes.py), no server involved.

What the library gets right is asserted. What it gets wrong or does not decode is a strict xfail whose reason
names the gap: the list binlake's own MySQL decoding has to close. A strict xfail fails the suite when a
library upgrade fixes the gap, so the list stays true.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.binlog_bytes import (
    CorpusSequence,
    decode_pymysqlreplication,
    load_sequence,
    payload_events,
    sequence_names,
    server_form,
    split_event,
)


def _decoded(name: str) -> tuple[CorpusSequence, list[Any]]:
    seq = load_sequence(name)
    return seq, decode_pymysqlreplication([server_form(e) for e in seq.events], use_checksum=True)


def _plain(value: Any) -> Any:
    """python-mysql-replication hands MySQL binary JSON strings and keys back as bytes."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _image(values: dict[str, Any]) -> list[Any]:
    return [_plain(v) for v in values.values()]


def _expected_image(image: list[Any]) -> list[Any]:
    return [v["json"] if isinstance(v, dict) and "json" in v else v for v in image]


# --- the corpus itself -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sequence_names())
def test_corpus_events_are_whole_and_match_their_expected_entries(name):
    seq = load_sequence(name)
    assert [e.header.type_code for e in seq.events] == [x["type"] for x in seq.expected["events"]]
    for event in seq.events:
        size = event.header.event_size
        if event.framing == "recorded":
            # recorded with its CRC32 (which split_event verified) or from a stream without checksums
            assert size == len(event.raw)
        elif event.framing == "recorded_checksum_stripped":
            assert size == len(event.raw) + 4 and event.checksum is None
        else:
            assert size == len(event.raw) and event.checksum is None
        assert split_event(server_form(event), event.framing).body == event.body


# --- python-mysql-replication on MySQL 8.0 bytes --------------------------------------------------------------


def _table_maps() -> tuple[CorpusSequence, list[Any]]:
    return _decoded("gomysql_table_map_full_80")


def test_full_row_metadata_column_names_signedness_and_primary_keys():
    seq, events = _table_maps()
    for event, entry in zip(events, seq.expected["events"], strict=True):
        want = entry["expect"]
        assert (event.schema, event.table) == (want["schema"], want["table"])
        if "column_names" in want:
            assert [c.name for c in event.columns] == want["column_names"]
        if "primary_key" in want:
            meta = event.optional_metadata
            if any(want["primary_key_prefix"]):
                assert list(meta.primary_keys_with_prefix) == want["primary_key"]
                assert list(meta.primary_keys_with_prefix.values()) == want["primary_key_prefix"]
            else:
                assert meta.simple_primary_key_list == want["primary_key"]
        for index, unsigned in want.get("unsigned_by_index", {}).items():
            assert event.columns[int(index)].unsigned is unsigned


def test_full_row_metadata_column_charsets():
    seq, events = _table_maps()
    want = seq.expected["events"][1]["expect"]["collation_by_index"]
    meta = events[1].optional_metadata
    assert meta.column_charset == list(want.values())


def test_full_row_metadata_enum_and_set_values_and_collations():
    seq, events = _table_maps()
    want = seq.expected["events"][1]["expect"]
    for index, values in want["enum_values_by_index"].items():
        assert _plain(events[1].columns[int(index)].enum_values) == [""] + values
    for index, values in want["set_values_by_index"].items():
        assert _plain(events[1].columns[int(index)].set_values) == values
    assert events[1].optional_metadata.enum_and_set_collation_list == list(want["enum_set_collation_by_index"].values())
    assert events[1].columns[26].collation_name == "gbk_chinese_ci"  # collation id 28, as the source's DDL says


def test_full_row_metadata_geometry_types_include_geometrycollection():
    seq, events = _table_maps()
    want = seq.expected["events"][1]["expect"]["geometry_type_by_index"]
    assert events[1].optional_metadata.geometry_type_list == list(want.values())


def test_partial_json_before_images_are_mysql_binary_json():
    seq, events = _decoded("vitess_partial_json_8040")
    checked = 0
    for event, entry in zip(events, seq.expected["events"], strict=True):
        if entry["type"] != 39 or entry["expect"].get("before_stated_by_source_disagrees_with_bytes"):
            continue
        assert type(event).__name__ == "PartialUpdateRowsEvent"
        for row, want in zip(event.rows, entry["expect"]["rows"], strict=True):
            assert _image(row["before_values"]) == _expected_image(want["before"]), entry["case"]
            checked += 1
    assert checked == 7


def _diff_ops(diff: Any) -> list[list[Any]]:
    ops = []
    for op in diff.operations if hasattr(diff, "operations") else [diff]:
        entry = [op.op.name.upper(), _plain(op.path)]
        if op.op.name.upper() != "REMOVE":
            entry.append(_plain(op.value))
        ops.append(entry)
    return ops


def _diff_cases(multi_op: bool) -> list[tuple[Any, list[Any], str]]:
    seq, events = _decoded("vitess_partial_json_8040")
    cases = []
    for event, entry in zip(events, seq.expected["events"], strict=True):
        if entry["type"] != 39:
            continue
        for row, want in zip(event.rows, entry["expect"]["rows"], strict=True):
            after = want["after"][2]
            if isinstance(after, dict) and "json_diff" in after and (len(after["json_diff"]) > 1) == multi_op:
                cases.append((row["after_values"]["UNKNOWN_COL2"], after["json_diff"], entry["case"]))
    return cases


def test_partial_json_single_operation_diffs_match_mysqlbinlog():
    cases = _diff_cases(multi_op=False)
    assert len(cases) == 4
    for diff, want, case in cases:
        assert _diff_ops(diff) == want, case


@pytest.mark.xfail(strict=True, reason="gap: a partial JSON update with several operations keeps only the first "
                   "(packet.read_binary_json reads one diff and drops the rest), so the after image is wrong")
def test_partial_json_multi_operation_diffs_match_mysqlbinlog():
    cases = _diff_cases(multi_op=True)
    assert len(cases) == 2
    for diff, want, case in cases:
        assert _diff_ops(diff) == want, case


@pytest.mark.xfail(strict=True, reason="gap: a full JSON value that is the JSON literal null decodes to None, "
                   "the same as SQL NULL (none_sources says 'null' for both)")
def test_partial_json_full_json_null_is_not_sql_null():
    seq, events = _decoded("vitess_partial_json_8040")
    cases = {e["case"]: i for i, e in enumerate(seq.expected["events"]) if e["type"] == 39}
    json_null_after = events[cases["json_null"]].rows[0]["after_values"]["UNKNOWN_COL2"]
    sql_null_before = events[cases["null_literal_string"]].rows[0]["before_values"]["UNKNOWN_COL2"]
    assert json_null_after != sql_null_before


@pytest.mark.parametrize("name", ["vitess_transaction_payload", "java_transaction_payload",
                                  "gomysql_transaction_payload_8027"])
@pytest.mark.xfail(strict=True, reason="gap: TRANSACTION_PAYLOAD_EVENT (type 40, binlog_transaction_compression) "
                   "is not decoded; the library yields a NotImplementedEvent and the rows inside are lost")
def test_transaction_payload_is_decoded(name):
    _, events = _decoded(name)
    assert type(events[0]).__name__ != "NotImplementedEvent"


@pytest.mark.xfail(strict=True, reason="gap: the MySQL 8.0 GTID_LOG_EVENT fields after sequence_number "
                   "(commit timestamps, transaction_length, server versions) are not read")
def test_gtid_event_8019_commit_timestamps():
    seq, events = _decoded("gomysql_gtid_8019")
    for event, entry in zip(events, seq.expected["events"], strict=True):
        assert event.immediate_commit_timestamp == entry["expect"]["immediate_commit_timestamp"]


def test_gtid_event_8019_logical_clock():
    _, events = _decoded("gomysql_gtid_8019")
    # not stated by the source's expectations; they are read from the same bytes go-mysql decodes, checked
    # here only for being a GTID event whose logical clock is ordered
    for event in events:
        assert type(event).__name__ == "GtidEvent"
        assert event.sequence_number > event.last_committed


# --- the payload's inner events, once decompressed outside the library --------------------------------------


def _zstd_decompress():
    zstandard = pytest.importorskip("zstandard")
    return lambda data, size: zstandard.ZstdDecompressor().decompress(data, max_output_size=max(size, 1 << 22))


@pytest.mark.parametrize("name", ["vitess_transaction_payload", "java_transaction_payload",
                                  "gomysql_transaction_payload_8027"])
def test_transaction_payload_inner_events_decode_once_decompressed(name):
    seq = load_sequence(name)
    want = seq.expected["events"][0]["expect"]
    inner = payload_events(seq.events[0].body, _zstd_decompress())
    types = [e.header.type_code for e in inner]
    assert types == want.get("inner_types", [e["type"] for e in want.get("inner", [])])
    # inner events carry no CRC32: decoded as the library decodes a checksum-less stream
    events = decode_pymysqlreplication([e.raw for e in inner], use_checksum=False)
    assert [type(e).__name__ for e in events if e is None or type(e).__name__ == "NotImplementedEvent"] == []
    for event, entry in zip(events, want.get("inner", [{"type": t} for t in types]), strict=True):
        if "query" in entry:
            assert event.query == entry["query"]
        if "schema" in entry:
            assert (event.schema, event.table) == (entry["schema"], entry["table"])
        if "rows" in entry and entry["type"] == 31:
            assert [[_image(r["before_values"]), _image(r["after_values"])] for r in event.rows] == [
                [r["before"], r["after"]] for r in entry["rows"]
            ]
        elif "rows" in entry:
            assert [_image(r["values"]) for r in event.rows] == [r["values"] for r in entry["rows"]]
        if "xid" in entry:
            assert event.xid == entry["xid"]


def test_expected_files_are_plain_json():
    for name in sequence_names():
        json.dumps(load_sequence(name).expected)
