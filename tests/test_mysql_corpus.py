"""Recorded MySQL 8.0 binlog bytes (tests/mysql_binlogs/, provenance in SOURCES.md) against the values their
sources state, decoded by python-mysql-replication from bytes (tests/binlog_bytes.py), no server involved.

What the library gets right is asserted. What it gets wrong or does not decode is a strict xfail whose reason
names the gap: the list binlake's own MySQL decoding has to close. A strict xfail fails the suite when a
library upgrade fixes the gap, so the list stays true.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pymysqlreplication.row_event
import pytest

from cdc_core.binlog import columns as binlog_columns
from cdc_core.binlog.decoder import RowDecoder, layout_schema
from cdc_core.binlog.event_loop import EventLoop
from cdc_core.binlog.events import Op, PreparedCommit, RowsEvent, TableLayout, TransactionEnd, TransactionStart
from cdc_core.binlog.json_diff import REMOVE, partial_images, read_diffs
from cdc_core.binlog.mysql_gtid import gtid_event, previous_gtids, tagged_gtid_event
from cdc_core.binlog.undecodable import PartialJsonUpdate
from cdc_core.offset.gtid import Gtid, GtidSet
from cdc_core.offset.position import BinlogPosition
from cdc_core.offset.startup import Mark, _marks, find_start, first_not_in
from cdc_core.types.registry import codec_for
from tests.binlog_bytes import (
    CorpusSequence,
    decode_pymysqlreplication,
    load_sequence,
    payload_events,
    positioned,
    recorded_opener,
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


# --- binlake's own decoding of the same bytes: its event loop, decoder and codecs ----------------------------
#
# The sequences run through binlake's event loop (cdc_core/binlog/event_loop.py) from an event source over the
# recorded bytes (tests/binlog_bytes.py: RecordedSource), the path the stream's reader takes. Tables whose
# recorded TABLE_MAPs carry no column names (binlog_row_metadata=MINIMAL on the source's server) are named as
# the library's control connection would name them from information_schema: with the source's names where it
# states them, else positional labels (the values are compared by position).

PAYLOADS = ["vitess_transaction_payload", "java_transaction_payload", "gomysql_transaction_payload_8027"]
TABLE_COLUMNS = {
    "vitess_transaction_payload": {("vt_commerce", "customer"): ["c0", "c1"]},
    "java_transaction_payload": {("demo", "movies"): [f"c{i}" for i in range(11)]},
    "gomysql_transaction_payload_8027": {("compression_test", "large_data"): ["c0", "c1", "c2"]},
    "vitess_partial_json_8040": {("vt_commerce", "customer"): ["customer_id", "email", "jd"]},
}
START = BinlogPosition("binlog.000001", 4)


@pytest.fixture
def named(monkeypatch):
    """Name the columns of a sequence's TABLE_MAPs that carry no names (see above)."""

    def use(name: str) -> None:
        names = TABLE_COLUMNS.get(name, {})
        monkeypatch.setattr(pymysqlreplication.row_event, "fetch_column_names",
                            lambda ctl, schema, table, **kw: names.get((schema, table), []))

    return use


def _loop_records(name: str, **options) -> tuple[list[Any], list[tuple[BinlogPosition, bytes]]]:
    seq = load_sequence(name)
    events = positioned([server_form(e) for e in seq.events])
    return list(EventLoop(recorded_opener(events), START, decoder=RowDecoder(), **options).records()), events


def _canonical(layout: TableLayout, row: tuple) -> list[Any]:
    """A decoded row's values as the stream keeps them (each column's codec's binlog_value)."""
    return [None if v is None else codec_for(c).binlog_value(c, v) for c, v in zip(layout.schema.columns, row,
                                                                                    strict=True)]


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


@pytest.mark.parametrize("name", PAYLOADS)
def test_binlake_streams_a_compressed_transaction_as_one_unit(name, named):
    """TRANSACTION_PAYLOAD_EVENT through binlake's loop: the inner events' records at the payload's end position,
    the rows as one PreparedCommit ending with the transaction's XID, the values the source states."""
    named(name)
    records, events = _loop_records(name, starts=True)
    payload_end = events[0][0]
    want = load_sequence(name).expected["events"][0]["expect"]
    inner = want.get("inner_types", [e["type"] for e in want.get("inner", [])])
    (unit,) = [r for r in records if isinstance(r, PreparedCommit)]
    assert unit.position == payload_end and unit.end == TransactionEnd(payload_end, None, unit.end.timestamp)
    assert not [r for r in records if isinstance(r, RowsEvent)]  # rows only inside the unit
    assert [ev.op for ev in unit.events] == [{30: Op.INSERT, 31: Op.UPDATE, 32: Op.DELETE}[t] for t in inner
                                             if t in (30, 31, 32)]
    layouts = {r.id: r for r in records if isinstance(r, TableLayout)}
    stated = [e for e in want.get("inner", []) if "rows" in e]
    for ev, entry in zip(unit.events, stated, strict=False):
        layout = layouts[ev.layout]
        if ev.op == Op.UPDATE:
            got = [[list(map(_text, _canonical(layout, b))), list(map(_text, _canonical(layout, a)))]
                   for b, a in ev.rows]
            assert got == [[r["before"], r["after"]] for r in entry["rows"]]
        else:
            assert [list(map(_text, _canonical(layout, r))) for r in ev.rows] == [r["values"] for r in entry["rows"]]
    assert len(stated) <= len(unit.events)


@pytest.mark.parametrize("name", PAYLOADS)
def test_a_compressed_transactions_rows_have_distinct_increasing_seqs(name, named):
    """Every inner event ends at the payload's end: ``first_row`` numbers the unit's rows on, so the
    ``_cdc_seq`` of each row (position.seq(first_row + i), as the batch computes it) is unique and increasing in
    binlog order."""
    named(name)
    records, _ = _loop_records(name)
    (unit,) = [r for r in records if isinstance(r, PreparedCommit)]
    seqs = [ev.position.seq(ev.first_row + i) for ev in unit.events for i in range(len(ev.rows))]
    assert len(seqs) == sum(len(ev.rows) for ev in unit.events) and seqs == sorted(set(seqs))
    assert {s >> 12 for s in seqs} == {unit.position.seq() >> 12}  # one position, rows told apart below it


@pytest.mark.parametrize("name", PAYLOADS)
def test_a_restart_after_a_compressed_transaction_reads_none_of_its_rows(name, named):
    named(name)
    records, events = _loop_records(name, skip_through=events_end(name))
    assert not [r for r in records if isinstance(r, PreparedCommit | RowsEvent)]
    assert [r.position for r in records if isinstance(r, TransactionEnd)] == [events[0][0]]


@pytest.mark.parametrize("name", PAYLOADS)
def test_the_start_scans_see_a_compressed_transaction_as_one_transaction(name):
    """A MySQL GTID event, then the payload, then the next transaction's GTID event: startup.gtid with a set holding
    the first GTID (cdc_core/offset/startup.py: first_not_in) starts at the payload's end, before the next one; a
    set without it starts before the GTID event; a timestamp start names no position inside the payload."""
    first, second = (load_sequence("gomysql_gtid_8019").events[i] for i in (2, 0))
    events = positioned([server_form(first), *(server_form(e) for e in load_sequence(name).events),
                         server_form(second)])
    payload_end = events[-2][0]

    def marks() -> list[Mark]:
        return list(_marks(EventLoop(recorded_opener(events), START, starts=True).records()))

    gtid = gtid_event(first.body).gtid
    assert first_not_in(marks(), GtidSet.parse(gtid), START) == (payload_end, GtidSet.parse(gtid))
    assert first_not_in(marks(), GtidSet(), START) == (START, GtidSet())
    assert {m.position for m in marks() if m.kind != "gtid"} == {payload_end}
    assert find_start(marks(), gtid=gtid, start=START) == payload_end


def events_end(name: str) -> BinlogPosition:
    return positioned([server_form(e) for e in load_sequence(name).events])[-1][0]


def _partial_cases() -> list[tuple[dict, RowsEvent, TableLayout]]:
    records, _ = _loop_records("vitess_partial_json_8040")
    layouts = {r.id: r for r in records if isinstance(r, TableLayout)}
    rows = [r for r in records if isinstance(r, RowsEvent)]
    entries = [e for e in load_sequence("vitess_partial_json_8040").expected["events"] if e["type"] == 39]
    assert len(rows) == len(entries) == 8
    return [(e, r, layouts[r.layout]) for e, r in zip(entries, rows, strict=True)]


def test_binlake_before_images_are_mysqls_json_text(named):
    """MySQL binary JSON written as MySQL writes it: the before images' text equals the source's mysqlbinlog -vvv
    text exactly (key order, ", " and ": "), and the document equals the one it states."""
    named("vitess_partial_json_8040")
    checked = 0
    for entry, ev, layout in _partial_cases():
        assert ev.op == Op.UPDATE and len(ev.rows) == len(entry["expect"]["rows"])
        for (before, _), want in zip(ev.rows, entry["expect"]["rows"], strict=True):
            got = _canonical(layout, before)[2]
            stated = want["before"][2]
            if stated is None:
                assert got is None  # SQL NULL
            elif not entry["expect"].get("before_stated_by_source_disagrees_with_bytes"):
                assert json.loads(got) == stated["json"], entry["case"]
                if "text" in stated:
                    assert got == stated["text"], entry["case"]
                    checked += 1
    assert checked == 6


def test_binlake_reads_every_diff_of_a_partial_update(named):
    """The diffs binlake reads from each partial JSON column are the ones mysqlbinlog -vvv prints, in order, also
    where the library keeps only the first (the multi-operation cases)."""
    named("vitess_partial_json_8040")
    seq = load_sequence("vitess_partial_json_8040")
    events = decode_pymysqlreplication([server_form(e) for e in seq.events], use_checksum=True)
    checked = 0
    for event, entry in zip(events, seq.expected["events"], strict=True):
        if entry["type"] != 39:
            continue
        binlog_columns.prepare(event)
        for img, want in zip(partial_images(event), entry["expect"]["rows"], strict=True):
            after = want["after"][2]
            if isinstance(after, dict) and "json_diff" in after:
                got = [[("REPLACE", "INSERT", "REMOVE")[d.operation], _path_text(d.path)]
                       + ([] if d.operation == REMOVE else [d.value]) for d in read_diffs(img.after["jd"])]
                assert img.partial == ("jd",) and got == after["json_diff"], entry["case"]
                checked += 1
            else:
                assert img.partial == (), entry["case"]
    assert checked == 6


def _path_text(path: tuple) -> str:
    return "$" + "".join(f".{leg}" for leg in path)


def test_binlake_after_images_equal_the_sources_rendering_evaluated_by_a_server(named, db):
    """The after image of each partial update is the before image with its diffs applied: equal to what the
    source's own rendering of the event (vitess' JSON_REPLACE/JSON_REMOVE/JSON_INSERT expression around the before
    document) gives when a real server evaluates it (MariaDB's JSON functions; CAST(x AS JSON), which MariaDB lacks,
    as JSON_EXTRACT(x, '$')). A full JSON value (no diff) is that value: the JSON null is 'null', never SQL NULL."""
    named("vitess_partial_json_8040")
    _, conn = db
    checked = 0
    with conn.cursor() as cur:
        for entry, ev, layout in _partial_cases():
            if entry["expect"].get("before_stated_by_source_disagrees_with_bytes"):
                continue  # evaluated on binlake's own before text below all the same
            for (before, after), want in zip(ev.rows, entry["expect"]["rows"], strict=True):
                got_before, got_after = _canonical(layout, before)[2], _canonical(layout, after)[2]
                stated = want["after"][2]
                if "json" in stated:
                    assert got_after is not None and json.loads(got_after) == stated["json"], entry["case"]
                    checked += 1
                    continue
                expression = _mariadb(entry["expect"]["vitess_renders_after_json_as"])
                cur.execute(f"SELECT {expression.replace('%s', '%s', 1)}", (got_before,))
                (server_after,) = cur.fetchone()
                assert json.loads(got_after) == json.loads(server_after), entry["case"]
                checked += 1
    assert checked == 7


def _mariadb(expression: str) -> str:
    """The source's SQL with CAST(x AS JSON) written as MariaDB writes it."""
    return re.sub(r"CAST\((.*?) as JSON\)", r"JSON_EXTRACT(\1, '$')", expression)


def test_binlake_json_null_is_not_sql_null(named):
    named("vitess_partial_json_8040")
    cases = {e["case"]: (ev, layout) for e, ev, layout in _partial_cases()}
    json_null, layout = cases["json_null"]
    assert _canonical(layout, json_null.rows[0][1])[2] == "null"
    sql_null, layout = cases["null_literal_string"]
    assert _canonical(layout, sql_null.rows[0][0])[2] is None
    assert _canonical(layout, sql_null.rows[0][1])[2] == '"null"'  # the JSON string "null", as vitess states


def test_binlake_reads_mysql_8019_gtid_events():
    """GTID_LOG_EVENT with MySQL 8.0's fields (commit timestamps, transaction length, server versions) read from
    the bytes: every field the source states; through the loop each transaction's GTID is ``uuid:gno``."""
    seq = load_sequence("gomysql_gtid_8019")
    for event, entry in zip(seq.events, seq.expected["events"], strict=True):
        got = gtid_event(event.body)
        assert {k: getattr(got, k) for k in entry["expect"]} == entry["expect"], entry["case"]


def test_binlake_reads_tagged_gtids_and_gtid_sets():
    """MySQL 8.4+ tagged GTIDs: the GTID_TAGGED_LOG_EVENT's fields (MySQL's serialization library format) and
    the tagged PREVIOUS_GTIDS sets, as the source states them; the transaction's GTID is ``uuid:tag:gno``."""
    seq = load_sequence("gomysql_gtid_tagged")
    tagged, *previous = zip(seq.events, seq.expected["events"], strict=True)
    event, entry = tagged
    got, want = tagged_gtid_event(event.body), entry["expect"]
    assert (got.sid, got.gno, got.tag, got.last_committed, got.sequence_number, got.immediate_commit_timestamp,
            got.transaction_length, got.immediate_server_version) == (
        want["sid"], want["gno"], want["tag"], want["last_committed"], want["sequence_number"],
        want["immediate_commit_timestamp"], want["transaction_length"], want["immediate_server_version"])
    assert not want["original_commit_timestamp_encoded"]  # so the original equals the immediate one
    assert got.original_commit_timestamp == got.immediate_commit_timestamp
    assert not want["original_server_version_encoded"] and got.original_server_version == got.immediate_server_version
    assert got.gtid == f"{want['sid']}:{want['tag']}:{want['gno']}"
    for event, entry in previous:
        text = previous_gtids(event.body)
        assert text == entry["expect"]["gtid_set"]
        assert str(GtidSet.parse(text)) == text  # the GTID set type's canonical form (cdc_core/offset/gtid.py)


def test_the_loop_carries_mysqls_gtids_on_its_records():
    """Through binlake's loop: a GTID_LOG_EVENT's ``uuid:n`` and a GTID_TAGGED_LOG_EVENT's ``uuid:tag:n`` on the
    transaction's records (the library reads neither the 8.0 fields nor the tagged event)."""
    plain = load_sequence("gomysql_gtid_8019").events[2]
    tagged = load_sequence("gomysql_gtid_tagged").events[0]
    events = positioned([server_form(plain), server_form(tagged)])
    starts = [r for r in EventLoop(recorded_opener(events), START, starts=True).records()
              if isinstance(r, TransactionStart)]
    assert [(r.position, r.gtid) for r in starts] == [
        (events[0][0], gtid_event(plain.body).gtid), (events[1][0], "896e7882-18fe-11ef-ab88-22222d34d411:foobaz:1")]
    # the plain string is the GTID type's canonical form: a checkpoint or startup.gtid compares it as is
    assert all(str(Gtid.parse(r.gtid)) == r.gtid for r in starts)


def test_binlake_captures_invisible_columns_of_a_mysql_table_map():
    """MySQL 8.0.23+ INVISIBLE columns are in the table map (VISIBILITY metadata, which the library reads as the
    source states) and so in binlake's layout, each one a column like the others (tests/test_invisible_columns.py:
    the snapshot's SELECT names them, the stream fills them)."""
    seq = load_sequence("gomysql_table_map_visibility_80")
    (event,) = decode_pymysqlreplication([server_form(seq.events[0])], use_checksum=True)
    want = seq.expected["events"][0]["expect"]
    assert event.optional_metadata.visibility_list == [want["visible_by_index"][str(i)] for i in range(11)]
    binlog_columns.prepare(event)  # as the decoder prepares a table map's columns
    layout = layout_schema(event.get_table())
    assert [c.name for c in layout.columns] == want["column_names"]


def test_a_partial_update_binlake_cannot_complete_stops_the_readers_of_its_table(named):
    """A diff MySQL itself would reject (a REPLACE of a member the before image lacks: the recorded 'replace' event
    with its path changed to $.rolx) is refused with the event's position, never applied half right; a reader of
    other tables passes over it."""
    named("vitess_partial_json_8040")
    seq = load_sequence("vitess_partial_json_8040")
    index = next(i for i, e in enumerate(seq.expected["events"]) if e.get("case") == "replace")
    event = seq.events[index]
    broken = dataclasses.replace(event, body=event.body.replace(b"$.role", b"$.rolx"))
    events = positioned([server_form(e) for e in seq.events[:3]] + [server_form(broken)])
    with pytest.raises(PartialJsonUpdate, match=rf"ending at {events[-1][0]} \(PARTIAL_UPDATE_ROWS_EVENT, type 39\)"
                                                r".*REPLACE \$\.\"rolx\": nothing there to replace.*"
                                                r"binlog_row_value_options is PARTIAL_JSON"):
        list(EventLoop(recorded_opener(events), START, decoder=RowDecoder()).records())
    other = EventLoop(recorded_opener(events), START, decoder=RowDecoder(), capture=lambda db, table: False)
    assert not [r for r in other.records() if isinstance(r, RowsEvent)]
