"""A Delta table's schema read from its log alone, without opening the table: loading the
Dagster definitions reads every table's columns, and delta-rs's open (the log replayed into a
snapshot of the table's files) costs about 1–2 ms per table, seconds at 2,000 tables.

The schema is the newest ``metaData`` action: the commits after the latest checkpoint are
read newest first until one holds it, else the checkpoint's own (a single-file Parquet
checkpoint). Only a local lake is read this way; an object store, a multi-part or v2
checkpoint, or anything unexpected in the log falls back to delta-rs
(:func:`pipelines.lake.tables.open_table`), so the answer is always delta-rs's own schema.

Invariant: the schema equals ``delta_schema(open_table(uri))`` for every table, after
creation, appends, added columns, rewrites and checkpoints
(tests/test_lake_log_schema.py).
"""

from __future__ import annotations

import json
import os
import re
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import Schema

from pipelines.lake.tables import delta_schema, open_table

COMMIT = re.compile(r"^(\d{20})\.json$")
CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.")


def _local_path(uri: str, storage_options: dict | None) -> str | None:
    """The local folder of ``uri``, or None when it is not on the local filesystem."""
    if storage_options:
        return None
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return unquote(parsed.path) if parsed.scheme else uri
    return None


def _from_log(log: str) -> pa.Schema | None:
    """The schema of the newest ``metaData`` action in the log folder ``log``; None when
    the log cannot be read this way (the caller opens the table)."""
    names = os.listdir(log)
    commits = sorted((int(m.group(1)), n) for n in names if (m := COMMIT.match(n)))
    checkpoints = [int(m.group(1)) for n in names if (m := CHECKPOINT.match(n))]
    last = max(checkpoints, default=-1)
    for version, name in reversed(commits):
        if version <= last:
            break
        with open(os.path.join(log, name), encoding="utf-8") as f:
            for line in f:
                # any writer's formatting: an action is a one-key object on its own line
                if '"metaData"' in line and "metaData" in (action := json.loads(line)):
                    return Schema.from_json(action["metaData"]["schemaString"]).to_arrow()
    if last < 0 or f"{last:020d}.checkpoint.parquet" not in names:
        return None  # no checkpoint (a log without its first commit?), or a multi-part or v2 one
    metadata = pq.read_table(os.path.join(log, f"{last:020d}.checkpoint.parquet"), columns=["metaData"])
    for row in metadata.column("metaData").to_pylist():
        if row and row.get("schemaString"):
            return Schema.from_json(row["schemaString"]).to_arrow()
    return None


def table_schema(uri: str, storage_options: dict | None = None) -> pa.Schema | None:
    """The schema of the Delta table at ``uri``, or None when there is no table there."""
    path = _local_path(uri, storage_options)
    if path is not None:
        log = os.path.join(path, "_delta_log")
        if not os.path.isdir(log):
            return None
        try:
            schema = _from_log(log)
        except (OSError, ValueError, KeyError, pa.ArrowException):
            schema = None  # read by delta-rs below
        if schema is not None:
            return pa.schema(schema)
    dt = open_table(uri, storage_options)
    return delta_schema(dt) if dt is not None else None
