"""Test oracle: no binlog change applied twice, none lost, proved by counting — per table and
op, and per key.

The binlog's side is read by ``mariadb-binlog`` (the server's own client, not binlake's
reader): each decoded row (``### INSERT INTO``, ``### UPDATE``, ``### DELETE FROM``) is one
change, at its event's end position, in its transaction (GTID). A prepared XA transaction's
rows count at its ``XA COMMIT``, never after ``XA ROLLBACK``. A key is the text
``mariadb-binlog`` prints for the primary-key columns (``@1=7``, ``@2='ab'``).

Per table and op, binlake's side is what every stream commit of the table records
(``binlake.stream.changes``, docs/contracts.md), summed over every commit of every run: a
batch applied twice adds its changes again (the sum is larger), one lost leaves them out.

Per key — so that a change lost on one key and another applied twice on another cannot
cancel out — binlake's side is what each stream commit did to each key in Delta: the table
before the commit and after it, compared by key and ``_cdc_seq`` (a key added: an insert, gone:
a delete, its ``_cdc_seq`` changed: an update). The binlog's side is the changes in that
commit's range (after the table's previous stream commit, up to this one's applied
position), folded per key the same way from the table before the commit. Counted from the
first stream commit after the snapshot's last high watermark, since before it the hand-off
rightly drops changes the snapshot holds. Keyless tables are counted per table and op only.

A commit's range bound is its offset: a position of the server read at a transaction's end;
inside a transaction, or for an offset of another server (before a failover), its GTID and its
rows into the transaction (``gtid``/``txn_gtid``/``txn_rows``: mariadb-binlog prints a
statement's rows only after all of its row events, so their events' positions are not known;
and the same transactions are in a replica's binlog, ``log_slave_updates``, so one binlog
counts across a failover). ``txn_rows`` counts the rows of every captured table: ``names``
must be all of them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field

from deltalake import DeltaTable

from cdc_core.config import BinlakeConfig
from cdc_core.offset.position import BinlogPosition
from cdc_core.offset.stream_offset import OFFSET_KEY, StreamOffset
from cdc_core.routes import Router
from cdc_core.source.connection import ConnectionSettings, connect, connection_settings
from pipelines.lake.control_store import ControlStore
from pipelines.lake.offsets import CHANGES_KEY
from pipelines.lake.tables import open_table, table_uri
from pipelines.stream.online_backfill import BACKFILL_KEY

OPS = ("c", "u", "d")
_ROW = re.compile(r"^### (INSERT INTO|UPDATE|DELETE FROM) `((?:[^`]|``)+)`\.`((?:[^`]|``)+)`$")
_OP = {"INSERT INTO": "c", "UPDATE": "u", "DELETE FROM": "d"}
_VALUE = re.compile(r"^###   @(\d+)=(.*)$")
_END = re.compile(r"\bend_log_pos (\d+)\b")
_GTID = re.compile(r"\bGTID (\d+-\d+-\d+)\b")
_XA = re.compile(r"^XA (PREPARE|COMMIT|ROLLBACK) (X'[0-9a-fA-F]*',X'[0-9a-fA-F]*',\d+)(.*)$")
Key = tuple[str, ...]


def _zero() -> Counter:
    return Counter(dict.fromkeys(OPS, 0))


@dataclass(frozen=True)
class RowChange:
    """One row change as mariadb-binlog decodes it: its table, op, the key of its before and
    after image (None where the op has no such image, or the table no key), the end position
    of its statement's last row event (an XA transaction's rows: of its XA COMMIT) and its
    transaction's GTID."""

    table: str
    op: str
    before: Key | None
    after: Key | None
    end: tuple[int, int]  # (file number, offset) of its statement's last event
    gtid: str


@dataclass
class Binlog:
    """The captured tables' row changes of one server's binlog, in binlog order."""

    server_id: int
    rows: list[RowChange] = field(default_factory=list)
    groups: dict[str, tuple[int, int]] = field(default_factory=dict)  # GTID -> (first row, rows)

    def cursor(self, point: BinlogPosition | StreamOffset) -> int:
        """How many of :attr:`rows` are at or before ``point``: a position of this server, or
        a stream offset (of another server: found by its GTID and rows into its transaction)."""
        if isinstance(point, BinlogPosition):
            return bisect_right([r.end for r in self.rows], (point.file_number, point.pos))
        if point.server_id in (None, self.server_id) and not point.inside_transaction:
            return self.cursor(point.applied)
        # mariadb-binlog prints a statement's rows after all of its row events: inside a
        # transaction only the offset's row count says which rows are at or before it.
        gtid = point.txn_gtid if point.inside_transaction else point.gtid
        assert gtid in self.groups, f"transaction {gtid} of {point} is not in the binlog of server {self.server_id}"
        first, rows = self.groups[gtid]
        return first + (point.txn_rows if point.inside_transaction else rows)


def _key_text(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == "'" else value


def read_binlog(settings: ConnectionSettings, start: BinlogPosition | StreamOffset, end: BinlogPosition | None,
                keys: dict[str, list[int]]) -> Binlog:
    """The row changes of the tables of ``keys`` ("db.t" → the primary key's column ordinals,
    [] for a keyless table) that the server's binlog holds from ``start`` (a position of this
    server, at a transaction's start; a stream offset of another: from the first binlog file)
    to ``end`` (None: to its end), as ``mariadb-binlog`` decodes them. An XA transaction
    prepared before ``start`` is not known: its XA COMMIT counts no rows."""
    with connect(settings) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@server_id")
        server_id = cur.fetchone()[0]
        cur.execute("SHOW BINARY LOGS")
        held = [r[0] for r in cur.fetchall()]
    first = start if isinstance(start, BinlogPosition) else (
        start.resume if start.server_id in (None, server_id) else None)  # resume: the transaction's start
    files = [f for f in held if (first is None or BinlogPosition(f, 4).file_number >= first.file_number)
             and (end is None or BinlogPosition(f, 4).file_number <= end.file_number)]
    assert files and (first is None or files[0] == first.file), (
        f"the server no longer holds the binlog from {start} to {end}: {held}")
    binary = shutil.which("mariadb-binlog") or shutil.which("mysqlbinlog")
    assert binary, "the oracle needs mariadb-binlog (or mysqlbinlog)"
    binlog = Binlog(server_id)
    pending: dict[str, list[RowChange]] = {}  # prepared XA transactions' rows, by XID
    for f in files:
        # One file a run: positions are per file. -v decodes every row, one value a line.
        cmd = [binary, "--read-from-remote-server", f"--host={settings.host}", f"--port={settings.port}",
               f"--user={settings.user}", "--base64-output=DECODE-ROWS", "-v", f]
        if first is not None and f == first.file:
            cmd.insert(-1, f"--start-position={first.pos}")
        if end is not None and f == end.file:
            cmd.insert(-1, f"--stop-position={end.pos}")  # the first event starting at or after it is left out
        _parse(cmd, settings.password, BinlogPosition(f, 4).file_number, keys, binlog, pending)
    return binlog


def _parse(cmd: list[str], password: str, file_number: int, keys: dict[str, list[int]], binlog: Binlog,
           pending: dict[str, list[RowChange]]) -> None:
    gtid, end, group = "", 0, []
    row: dict | None = None
    image: str = ""

    def finish() -> None:
        nonlocal row
        if row is None:
            return
        ordinals = keys[row["table"]]
        key = {side: tuple(_key_text(row[side][i]) for i in ordinals) if ordinals and side in row else None
               for side in ("before", "after")}
        group.append(RowChange(row["table"], row["op"], key["before"], key["after"], (file_number, end), gtid))
        row = None

    def close_group(outcome: str | None, xid: str | None) -> None:
        """A transaction ends: its rows count now, or at its XA COMMIT (never after an XA ROLLBACK)."""
        nonlocal group, gtid
        rows = group
        if outcome == "PREPARE":
            pending[xid] = rows
            rows = []
        elif outcome in ("COMMIT", "ROLLBACK") and xid in pending:
            prepared = pending.pop(xid)
            rows = [RowChange(r.table, r.op, r.before, r.after, (file_number, end), gtid) for r in prepared] \
                if outcome == "COMMIT" else []
        first = len(binlog.rows)
        binlog.rows += rows
        if gtid:
            binlog.groups[gtid] = (first, len(rows))
        group, gtid = [], ""

    # The password through the environment: never on a command line other processes can list.
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                          env={**os.environ, "MYSQL_PWD": password}) as proc:
        for line in proc.stdout:
            line = line.rstrip("\n")
            if line.startswith("###"):
                if m := _ROW.match(line):
                    finish()
                    table = f"{m[2].replace('``', '`')}.{m[3].replace('``', '`')}"
                    row = {"table": table, "op": _OP[m[1]]} if table in keys else None
                elif row is not None and line in ("### WHERE", "### SET"):
                    image = "before" if line == "### WHERE" else "after"
                    row[image] = {}
                elif row is not None and (v := _VALUE.match(line)):
                    row[image][int(v[1])] = v[2]
                continue
            finish()
            if line.startswith("#") and (m := _END.search(line)):
                end = int(m[1])
                if g := _GTID.search(line):
                    if gtid or group:  # a group without COMMIT (a DDL) ends at the next GTID
                        close_group(None, None)
                    gtid = g[1]
            elif (m := _XA.match(line)) and (m[1] == "PREPARE" or (
                    m[1] in ("COMMIT", "ROLLBACK") and "ONE PHASE" not in m[3])):
                close_group(m[1], m[2])
            elif line.startswith("COMMIT"):
                close_group(None, None)
        finish()
        if gtid or group:
            close_group(None, None)
        err = proc.stderr.read()
    assert proc.returncode == 0, f"{cmd[0]} failed ({proc.returncode}): {err}"


def binlog_changes(settings: ConnectionSettings, start: BinlogPosition, end: BinlogPosition,
                   tables: set[str]) -> dict[str, Counter]:
    """Row changes per op of each of ``tables`` ("db.t") in the binlog events after ``start``
    up to ``end`` (both event end positions of one server, at transaction boundaries), as
    ``mariadb-binlog`` decodes them."""
    binlog = read_binlog(settings, start, end, {t: [] for t in tables})
    counts = {t: _zero() for t in tables}
    for r in binlog.rows[binlog.cursor(start):binlog.cursor(end)]:
        counts[r.table][r.op] += 1
    return counts


def stream_start(cfg: BinlakeConfig, names: list[str]) -> BinlogPosition:
    """Where the stream of a snapshotted pipeline first started: the lowest low watermark of
    the completed chunks of ``names`` (every captured table)."""
    lows = [r.low_watermark for n in names for r in _chunks(cfg, n)]
    assert lows, f"no completed snapshot chunk of {names}"
    return min(lows)


def _chunks(cfg: BinlakeConfig, name: str) -> list:
    uri = table_uri(cfg.sink.path, Router(cfg.routes).sink(name))
    return list(ControlStore.of(cfg).completed_chunks(name, open_table(uri, cfg.sink.storage_options)).values())


@dataclass(frozen=True)
class StreamCommit:
    version: int
    offset: StreamOffset
    changes: Counter  # what the commit records of the source table, per op
    merge: bool = False  # an online backfill's merge: rows read from MySQL, at the offset the table had


def stream_commits(cfg: BinlakeConfig, name: str) -> list[StreamCommit]:
    """The stream commits of source table ``name``'s Delta table, oldest first."""
    dt = DeltaTable(table_uri(cfg.sink.path, Router(cfg.routes).sink(name)),
                    storage_options=cfg.sink.storage_options or None)
    commits = []
    for commit in sorted(dt.history(), key=lambda c: c["version"]):
        if not commit.get(OFFSET_KEY):
            continue  # a snapshot commit, a table created, rows deleted by hand
        raw = commit.get(CHANGES_KEY)
        changes = (json.loads(raw) if isinstance(raw, str) else raw) if raw else {}
        commits.append(StreamCommit(commit["version"], StreamOffset.from_json(commit[OFFSET_KEY]),
                                    Counter(changes.get(name, {})), BACKFILL_KEY in commit))
    return commits


def committed_changes(cfg: BinlakeConfig, name: str) -> tuple[Counter, list[BinlogPosition]]:
    """The changes of source table ``name`` that its Delta table's stream commits record,
    summed over every commit, and each stream commit's applied position (oldest first)."""
    commits = stream_commits(cfg, name)
    total = _zero()
    for c in commits:
        total.update(c.changes)
    return total, [c.offset.applied for c in commits]


def primary_keys(settings: ConnectionSettings, names: list[str]) -> dict[str, list[int]]:
    """Each table's primary-key columns as their ordinal positions ([] without a primary key)."""
    with connect(settings) as conn, conn.cursor() as cur:
        keys = {}
        for n in names:
            cur.execute("SELECT c.ORDINAL_POSITION FROM information_schema.STATISTICS s "
                        "JOIN information_schema.COLUMNS c USING (TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME) "
                        "WHERE s.TABLE_SCHEMA = %s AND s.TABLE_NAME = %s AND s.INDEX_NAME = 'PRIMARY' "
                        "ORDER BY s.SEQ_IN_INDEX", tuple(n.split(".", 1)))
            keys[n] = [r[0] for r in cur.fetchall()]
    return keys


def _key_columns(settings: ConnectionSettings, name: str) -> list[str]:
    with connect(settings) as conn, conn.cursor() as cur:
        cur.execute("SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
                    "AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX", tuple(name.split(".", 1)))
        return [r[0] for r in cur.fetchall()]


def _delta_keys(dt: DeltaTable, version: int, columns: list[str], source: str | None) -> dict[Key, int]:
    """{key text: _cdc_seq} of the table at ``version`` (a route's sink: ``source``'s rows)."""
    dt.load_as_version(version)
    names = {n.lower(): n for n in dt.schema().to_arrow().names}
    wanted = [names[c.lower()] for c in columns] + ["_cdc_seq"] + (["_cdc_source"] if source else [])
    rows = dt.to_pyarrow_table(columns=wanted).to_pylist()
    return {tuple(str(r[c]) for c in wanted[:len(columns)]): r["_cdc_seq"] for r in rows
            if source is None or r["_cdc_source"] == source}


def _expected(rows: list[RowChange], before: dict[Key, int]) -> dict[Key, str]:
    """Each key's change over ``rows`` folded from the table ``before``: c, u or d."""
    present: dict[Key, bool] = {}
    for r in rows:
        if r.before is not None and r.before != r.after:
            present[r.before] = False  # deleted, or its key updated away
        if r.after is not None:
            present[r.after] = True
    out = {}
    for k, now in present.items():
        was = k in before
        if was or now:
            out[k] = "u" if was and now else ("c" if now else "d")
    return out


def _observed(before: dict[Key, int], after: dict[Key, int]) -> dict[Key, str]:
    """Each key's change between two versions of the table: c, u (its _cdc_seq changed) or d."""
    out = {k: "d" for k in before.keys() - after.keys()}
    out.update({k: "c" if k not in before else "u" for k, s in after.items() if before.get(k) != s})
    return out


def _per_key(cfg: BinlakeConfig, name: str, commits: list[StreamCommit], binlog: Binlog, start: int, lowest: int,
             columns: list[str]) -> list[str]:
    """Each stream commit's changes per key in Delta against the binlog's in its range (the
    first one's from the cursor ``start``), for the commits whose range starts at or after the
    cursor ``lowest``. An online backfill's merge has no binlog range of its own (it repairs rows
    from MySQL at the offset the table already had): the commit after it starts from its result."""
    router = Router(cfg.routes)
    dt = DeltaTable(table_uri(cfg.sink.path, router.sink(name)), storage_options=cfg.sink.storage_options or None)
    source = name if router.routed(name) else None
    applied: Counter = Counter()
    binlogs: Counter = Counter()
    wrong = []
    prev = start
    for c in commits:
        if c.merge:
            continue
        low, prev = prev, binlog.cursor(c.offset)
        if low < lowest:
            continue
        before, after = _delta_keys(dt, c.version - 1, columns, source), _delta_keys(dt, c.version, columns, source)
        expected = _expected([r for r in binlog.rows[low:prev] if r.table == name], before)
        observed = _observed(before, after)
        for k in expected.keys() | observed.keys():
            binlogs[k, expected.get(k)] += 1
            applied[k, observed.get(k)] += 1
            if expected.get(k) != observed.get(k) and len(wrong) < 10:
                wrong.append(f"key {k}: {observed.get(k) or 'nothing'} applied in version {c.version}, "
                             f"{expected.get(k) or 'nothing'} in the binlog of its range")
    totals = sorted({(k, op) for k, op in binlogs.keys() | applied.keys() if op and binlogs[k, op] != applied[k, op]})
    return [f"{name}: key {k} {op} {applied[k, op]} applied, {binlogs[k, op]} in the binlog" for k, op in totals[:10]] \
        + ([f"{name}: {w}" for w in wrong] if totals or wrong else [])


def assert_changes_counted(cfg: BinlakeConfig, names: list[str], start: BinlogPosition | StreamOffset | None = None,
                           end: BinlogPosition | StreamOffset | None = None,
                           read_from: BinlogPosition | None = None,
                           per_key: bool = True) -> dict[str, dict[str, int]]:
    """For each captured table of ``names`` (every captured table): the changes its stream
    commits record, summed over all of them, equal the binlog's changes from ``start``
    (default: the snapshot's lowest low watermark) to ``end`` (default: the checkpoint's
    applied offset, the end of a final run), every commit's offset is in that range, and each
    commit did to each key what the binlog's changes in its range do (tables with a primary
    key, from the first commit after the snapshot's high watermarks). ``read_from``: where the
    binlog is read from, when before ``start`` (an XA transaction prepared before it).
    ``per_key`` false leaves out the per-key check, which reads each commit's versions: a lake
    vacuumed with no retention no longer holds them (the sums and ranges are still checked).
    Returns the binlog's counts per table and op."""
    if start is None:
        start = stream_start(cfg, names)
    if end is None:
        cp = ControlStore.of(cfg).checkpoint()
        assert cp is not None, "no stream checkpoint"
        end = cp.offset
    settings = connection_settings(cfg)
    keys = primary_keys(settings, names)
    binlog = read_binlog(settings, read_from or start, end if isinstance(end, BinlogPosition) else None, keys)
    low, high = binlog.cursor(start), binlog.cursor(end)
    counts = {n: _zero() for n in names}
    for r in binlog.rows[low:high]:
        counts[r.table][r.op] += 1
    problems = []
    for n in names:
        commits = stream_commits(cfg, n)
        committed = _zero()
        for c in commits:
            committed.update(c.changes)
        outside = [str(c.offset.applied) for c in commits if not low <= binlog.cursor(c.offset) <= high]
        if outside:
            problems.append(f"{n}: commits applied through {outside}, outside the range ({start}, {end}]")
        want = counts[n]
        wrong = [f"{op} {committed[op]} committed, {want[op]} in the binlog "
                 f"({'changes applied twice' if committed[op] > want[op] else 'changes lost'})"
                 for op in OPS if committed[op] != want[op]]
        if wrong:
            problems.append(f"{n}: {'; '.join(wrong)} ({start} to {end}, {len(commits)} stream commits)")
        if keys[n] and per_key:
            highs = [binlog.cursor(r.high_watermark) for r in _chunks(cfg, n)] if _is_position(start, binlog) else []
            problems += _per_key(cfg, n, commits, binlog, low, max([low, *highs]), _key_columns(settings, n))
    assert not problems, "\n".join(problems)
    return {n: dict(counts[n]) for n in names}


def _is_position(point: BinlogPosition | StreamOffset, binlog: Binlog) -> bool:
    """Whether ``point`` is a position of the binlog's own server (chunk watermarks are then too)."""
    return isinstance(point, BinlogPosition) or point.server_id in (None, binlog.server_id)
