"""binlake configuration: the YAML contract of docs/contracts.md, validated with pydantic.

``${VAR}`` anywhere in the file is replaced from the environment before parsing.
Unknown keys and wrong types are errors that name the key; secrets never appear in
error messages or ``repr``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from cdc_core.cron import cron_problem
from cdc_core.errors import BadInput

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def captures(tables: list[str] | tuple[str, ...], exclude: list[str] | tuple[str, ...], qualified_name: str) -> bool:
    """Whether ``db.table`` matches a ``tables`` regex and no ``exclude`` regex."""
    return any(re.fullmatch(p, qualified_name) for p in tables) and not any(
        re.fullmatch(p, qualified_name) for p in exclude)


def excludes_column(exclude_columns: list[str] | tuple[str, ...], qualified_column: str) -> bool:
    """Whether ``db.table.column`` matches an ``exclude_columns`` regex."""
    return any(re.fullmatch(p, qualified_column) for p in exclude_columns)


def _compiled(patterns):
    """``patterns`` (regexes, or a mapping keyed by them) once each compiles; a ValueError naming the bad one."""
    for p in patterns:
        try:
            re.compile(p)
        except re.error as e:
            raise ValueError(f"invalid regex {p!r}: {e}") from None
    return patterns


class ConfigError(BadInput, ValueError):
    """A configuration problem; the message names the key and never holds a secret."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False, frozen=True)


class PipelineConfig(_Strict):
    name: str
    parallelism: int = Field(4, ge=1)
    schema_change_behavior: Literal["exception", "evolve", "try_evolve", "lenient", "ignore"] = "lenient"


class StartupConfig(_Strict):
    mode: Literal["initial", "snapshot", "latest", "earliest", "specific", "timestamp"] = "initial"
    file: str | None = None
    pos: int | None = None
    gtid: str | None = None
    timestamp_ms: int | None = None


class SnapshotConfig(_Strict):
    chunk_size: int = Field(8096, ge=1)
    # binlake extension: rows one Spark task reads between one pair of watermarks, at most;
    # also the most a crash makes a re-run read again per task.
    max_rows_per_task: int = Field(250_000, ge=1)
    chunk_key_columns: dict[str, str] = {}
    # binlake extension: an online backfill of at least this many chunks reads them in groups
    # while the stream goes on, several chunks at once where ``runner`` puts the snapshot's
    # groups: in threads of the stream process (local), or on Spark (the stream process starts
    # its session then, in the background; until it is up, in a reader thread); 0: always one
    # chunk at a time in the stream process (bench/backfill.py).
    backfill_spark_min_chunks: int = Field(64, ge=0)
    # binlake extension: rows of chunks (at least one chunk) a read group of such a backfill
    # holds per read slot (a local runner's thread, a Spark task slot, or the reader thread):
    # the group's fixed cost (a commit, a scan of Delta's rows of its range, a Spark job) is
    # shared by this many rows whatever the chunk size (bench/backfill.py); the driver holds one group's rows at a time.
    backfill_group_rows: int = Field(100_000, ge=1)
    # binlake extension: where the snapshot's chunk groups (and a large online backfill's chunk
    # reads) run: "spark" as Spark tasks, "local" in threads of the binlake process (Spark is
    # not started), "auto" Spark on a cluster master and local on ``local[...]``, where Spark
    # adds a JVM and Python workers on the same cores, not cores (bench/snapshot.py --whole-process).
    runner: Literal["auto", "spark", "local"] = "auto"


class ParallelDecodeConfig(_Strict):
    """Catch-up past the single binlog reader (``source.parallel_decode``; pipelines/stream/reader.py):
    a backlog of at least ``min_backlog_mb`` at a (re)start is cut at transaction boundaries
    into chunks of about ``chunk_mb`` of binlog, decoded by up to ``workers`` processes at once
    (replication ids ``server_id + 2`` … ``server_id + 1 + workers``) and applied in binlog order."""

    workers: int = Field(1, ge=1, le=16)  # 1: one reader, as before (the default)
    min_backlog_mb: float = Field(64, ge=0)  # smaller backlogs are read by one reader: not worth the start-up
    chunk_mb: float = Field(16, gt=0)  # binlog per chunk; at most `workers` chunks are spooled to disk at once


class SslConfig(_Strict):
    """TLS to the source (``source.ssl``; present = required). Verification is on unless
    ``verify: false`` says otherwise: the server certificate must chain to ``ca`` (the system's
    trusted CAs when ``ca`` is not given) and name the host (``check_hostname``)."""

    ca: str | None = None  # PEM file of the CA that signed the server certificate
    cert: str | None = None  # client certificate (PEM), for users created REQUIRE X509 / SUBJECT
    key: str | None = None  # the client certificate's private key (PEM)
    verify: bool = True  # false: encrypt but accept any server certificate (only when said explicitly)
    check_hostname: bool = True  # with verify: the certificate must name source.host

    @field_validator("ca", "cert", "key")
    @classmethod
    def _readable_file(cls, path: str | None) -> str | None:
        if path is not None and not os.access(path, os.R_OK):
            raise ValueError(f"cannot read file {path}")
        return path

    @model_validator(mode="after")
    def _key_needs_cert(self) -> SslConfig:
        if self.key is not None and self.cert is None:
            raise ValueError("key is set without cert (the client certificate)")
        return self


class SourceConfig(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(3306, ge=1, le=65535)
    user: str
    password: SecretStr = SecretStr("")
    server_id: int = Field(5400, ge=1, le=2**32 - 1)
    server_time_zone: str = "UTC"
    tables: list[str]
    exclude_tables: list[str] = []
    # Regexes over "db.table.column" (full match), as Debezium's column.exclude.list: left out of
    # the snapshot, the stream, Delta and the schema history (cdc_core/source/capture.py).
    exclude_columns: list[str] = []
    # "db.table" -> the columns that identify its rows, for a table without a primary key (as
    # Debezium's message.key.columns): trusted to be unique; NOT NULL is checked. Tables without
    # a primary key or one of these use a NOT NULL unique key, else their whole rows.
    key_columns: dict[str, list[str]] = {}
    startup: StartupConfig = StartupConfig()
    snapshot: SnapshotConfig = SnapshotConfig()
    parallel_decode: ParallelDecodeConfig = ParallelDecodeConfig()
    ssl: SslConfig | None = None  # TLS to the server; absent: plain connections

    @field_validator("tables", "exclude_tables", "exclude_columns")
    @classmethod
    def _regexes_compile(cls, patterns: list[str]) -> list[str]:
        return _compiled(patterns)

    def captures(self, qualified_name: str) -> bool:
        """Whether ``db.table`` is captured: matches ``tables`` and no ``exclude_tables``."""
        return captures(self.tables, self.exclude_tables, qualified_name)

    def excludes_column(self, qualified_column: str) -> bool:
        """Whether ``db.table.column`` matches an ``exclude_columns`` regex."""
        return excludes_column(self.exclude_columns, qualified_column)


# Option keys naming a credential: their values are masked in messages and never shown in repr.
_SECRET_OPTION = re.compile(r"key|secret|token|password|sas|credential", re.IGNORECASE)


DEFAULT_RETENTION_HOURS = 168  # Delta's own default of delta.deletedFileRetentionDuration (7 days)


class MaintenanceConfig(_Strict):
    """Lake maintenance (``sink.maintenance``; pipelines/lake/maintenance/): compaction of small
    files into files of about ``target_file_mb`` (capped for small tables), vacuum of files no
    version within ``retention_hours`` references, the log's checkpoints and retention."""

    # The stream compacts and vacuums its tables between batches; false: only `binlake maintain`
    # (and the Dagster maintenance job) do.
    auto: bool = True
    target_file_mb: float = Field(128, gt=0)
    # Files a version younger than this still references are kept (time travel, readers of an
    # older version); below Delta's default of 168 is accepted with a warning.
    retention_hours: int = Field(DEFAULT_RETENTION_HOURS, ge=0)
    # How often the stream vacuums each table and compacts the small files left after the last
    # compaction (a compaction is also started whenever a table's small files pass their bound).
    interval_minutes: float = Field(10, gt=0)
    # A table holding more small files than this fails the Dagster check `small_files_under_bound`.
    max_small_files: int = Field(64, ge=1)

    def retention_warning(self) -> str | None:
        """Why a retention below Delta's default is risky, or None."""
        if self.retention_hours >= DEFAULT_RETENTION_HOURS:
            return None
        return (f"sink.maintenance.retention_hours is {self.retention_hours} (Delta's default: "
                f"{DEFAULT_RETENTION_HOURS}): a reader of a version older than that (time travel, a long query) "
                "may find its files deleted")


class TableLayoutConfig(_Strict):
    """The layout of the Delta tables a ``sink.layout`` entry matches."""

    # Compaction sorts a table's rows by these columns (then by its row key), so readers skip
    # files on them; copy-on-write then prunes less on the key (docs/maintenance.md).
    cluster_by: list[str] = []
    # Partition columns of tables created from now on (an existing table keeps its own);
    # updates and deletes of a partitioned table are one MERGE per batch, not copy-on-write.
    partition_by: list[str] = []


# Table properties binlake's stream cannot honour: it rewrites files to update and delete rows.
_REFUSED_PROPERTIES = {"delta.appendonly": "binlake's stream updates and deletes rows; an append-only table refuses "
                                           "that"}
_INTERVAL = re.compile(r"^\s*interval\s+(\d+)\s+(nanosecond|microsecond|millisecond|second|minute|hour|day|week)s?"
                       r"\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"nanosecond": 1e-9, "microsecond": 1e-6, "millisecond": 1e-3, "second": 1, "minute": 60,
                 "hour": 3600, "day": 86400, "week": 604800}


def interval_seconds(text: str) -> float | None:
    """Seconds of a Delta interval property value (``interval 7 days``), or None if it is not one."""
    m = _INTERVAL.match(text)
    return None if m is None else int(m.group(1)) * _UNIT_SECONDS[m.group(2).lower()]


class SinkConfig(_Strict):
    path: str = "./lake"  # a local folder or an object-store URI (s3://, gs://, abfss://, ...)
    storage_options: dict[str, str] = Field({}, repr=False)  # delta-rs's own option keys
    # Source metadata columns every table gets (cdc_core/schema/modes.py): the change's commit time
    # and its place in the binlog.
    metadata_columns: list[Literal["_cdc_ts", "_cdc_position"]] = []
    # Per table ("db.table", full-match regex, first match wins): what a Delta table keeps of its
    # source rows: current | soft_delete | history (docs/history.md).
    table_modes: dict[str, Literal["current", "soft_delete", "history"]] = {}
    # Tables ("db.table", full-match regexes) with an append-only changelog table of their own
    # (<path>/<db>/<table>__changes: every change, its op, time and position).
    change_feed: list[str] = []

    @field_validator("metadata_columns")
    @classmethod
    def _columns_once(cls, names: list[str]) -> list[str]:
        if len(set(names)) != len(names):
            raise ValueError("a column is named twice")
        return names

    @field_validator("table_modes", "change_feed")
    @classmethod
    def _table_patterns_compile(cls, patterns):
        return _compiled(patterns)

    def mode_of(self, qualified_name: str) -> str:
        """The mode of the Delta table ``db.table`` (``current`` unless ``table_modes`` says otherwise)."""
        return next((m for p, m in self.table_modes.items() if re.fullmatch(p, qualified_name)), "current")

    def feeds(self, qualified_name: str) -> bool:
        """Whether the Delta table ``db.table`` has a changelog table (``change_feed``)."""
        return any(re.fullmatch(p, qualified_name) for p in self.change_feed)

    # Delta table properties (delta.*) of every data table: set when binlake creates a table, and
    # on existing tables where delta-rs allows (pipelines/lake/maintenance/layout.py).
    table_properties: dict[str, str] = {}
    maintenance: MaintenanceConfig = MaintenanceConfig()
    # Per table ("db.table", full-match regex; the first matching entry wins): its layout.
    layout: dict[str, TableLayoutConfig] = {}

    @field_validator("layout")
    @classmethod
    def _layout_patterns_compile(cls, entries: dict[str, TableLayoutConfig]) -> dict[str, TableLayoutConfig]:
        return _compiled(entries)

    @model_validator(mode="after")
    def _properties_binlake_can_keep(self) -> SinkConfig:
        for key, value in self.table_properties.items():
            if key.lower() in _REFUSED_PROPERTIES and value.strip().lower() == "true":
                raise ValueError(f"table_properties.{key}: {_REFUSED_PROPERTIES[key.lower()]}")
            if key.lower() in ("delta.deletedfileretentionduration", "delta.logretentionduration"):
                seconds = interval_seconds(value)
                if seconds is None:
                    raise ValueError(f"table_properties.{key}: not a Delta interval ('interval 7 days')")
                if key.lower() == "delta.deletedfileretentionduration" and \
                        seconds < self.maintenance.retention_hours * 3600:
                    # Checkpoints drop a removed file's record after this; a vacuum within
                    # retention_hours would then take the file for one never committed.
                    raise ValueError(f"table_properties.{key}: {value} is shorter than "
                                     f"maintenance.retention_hours ({self.maintenance.retention_hours})")
        return self

    def layout_of(self, qualified_name: str) -> TableLayoutConfig:
        """The layout of the Delta table ``db.table``."""
        for pattern, layout in self.layout.items():
            if re.fullmatch(pattern, qualified_name):
                return layout
        return TableLayoutConfig()

    @field_validator("storage_options")
    @classmethod
    def _commits_stay_safe(cls, options: dict[str, str]) -> dict[str, str]:
        # delta-rs 1.x commits to S3 with conditional writes (create-if-absent) and no lock: an option
        # that turns them off, or asks for the DynamoDB lock it no longer has, would make commits fail
        # or mislead writers that rely on that lock.
        for key, value in options.items():
            k = key.lower()
            if k in ("conditional_put", "aws_conditional_put") and value.lower() == "disabled":
                raise ValueError(f"{key}: disabled turns off the conditional writes Delta commits need on an object "
                                 "store; remove it")
            if k == "aws_s3_locking_provider":
                raise ValueError(f"{key}: delta-rs 1.x has no DynamoDB lock (it ignores this key) and commits with "
                                 "S3 conditional writes instead; remove it, and stop writers that rely on the lock")
        return options

    def secret_values(self) -> list[str]:
        """Values of storage options whose key names a credential (to mask in any message)."""
        return [v for k, v in self.storage_options.items() if _SECRET_OPTION.search(k) and len(v) >= 4]


class StreamConfig(_Strict):
    max_batch_rows: int = Field(10000, ge=1)
    max_batch_seconds: float = Field(1.0, gt=0)
    # While reading a backlog (the last event read is over 5 s old by the source's clock): rows
    # that are late already go in fewer, larger commits (cdc_core/batch/micro_batch.py: BatchPolicy).
    catchup_batch_rows: int = Field(100_000, ge=1)
    catchup_batch_seconds: float = Field(10.0, gt=0)
    heartbeat_seconds: float = Field(30, gt=0)
    # inline: the engine applies a column change itself; external: it records the change as
    # pending and holds the table until another process (the Dagster sensor's run) applies it.
    schema_changes: Literal["inline", "external"] = "inline"
    max_held_rows: int = Field(100_000, ge=1)  # rows of held tables kept in memory before reading pauses


class RouteConfig(_Strict):
    source: str  # regex over "db.table" (full match); the first matching route wins
    sink: str  # "db.table" of the Delta table the matched tables are written to

    @field_validator("source")
    @classmethod
    def _source_compiles(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as e:
            raise ValueError(f"invalid regex {pattern!r}: {e}") from None
        return pattern

    @field_validator("sink")
    @classmethod
    def _sink_is_qualified(cls, sink: str) -> str:
        # The sink names the folder <sink.path>/<db>/<table>: a database part, no path separators,
        # and not the control folder _binlake.
        db, dot, table = sink.partition(".")
        if not (db and dot and table) or "/" in sink or "\\" in sink or db == "_binlake":
            raise ValueError(f"sink must be a table name 'db.table', got {sink!r}")
        return sink


class SparkConfig(_Strict):
    master: str | None = None  # default: BINLAKE_SPARK_MASTER or local[*]
    conf: dict[str, str] = {}


class FreshnessConfig(_Strict):
    """When a table's asset counts as stale in Dagster (its FreshnessPolicy): no stream
    materialization (batch or idle heartbeat) for ``warn_after_seconds`` warns, for ``fail_after_seconds`` fails."""

    fail_after_seconds: float = Field(3600, gt=0)
    warn_after_seconds: float | None = Field(None, gt=0)


class DagsterStreamConfig(_Strict):
    # bounded: each run drains the binlog up to its end as of the run's start (at most max_run_seconds),
    # commits and exits, and the hand-off sensor launches the next; continuous: a run streams until terminated.
    mode: Literal["bounded", "continuous"] = "bounded"
    max_run_seconds: float = Field(300, gt=0)


class ScheduledBackfillConfig(_Strict):
    """A scheduled backfill (binlake extension): the Dagster schedule ``binlake_backfill_<name>``
    launching ``binlake_backfill`` (or ``binlake_repair`` with ``repair_only``) for the captured
    tables its regexes match when it ticks."""

    name: str = Field(pattern=r"^[A-Za-z0-9_]+$")  # a Dagster name: letters, digits, underscores
    cron: str
    tables: list[str] = Field(min_length=1)  # regexes over "db.table" (full match), as source.tables
    from_key: str | None = None  # keys in [from_key, to_key) of each table's chunk key (not with repair_only)
    to_key: str | None = None
    repair_only: bool = False  # reconcile, backfill only the chunks that differ (binlake_repair)
    running: bool = False  # the schedule's default status (Dagster's default: stopped)
    timezone: str | None = None  # IANA name the cron is read in (default UTC)

    @field_validator("cron")
    @classmethod
    def _cron_valid(cls, cron: str) -> str:
        problem = cron_problem(cron)
        if problem:
            raise ValueError(f"not a cron expression: {problem}")
        return cron

    @field_validator("tables")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        return _compiled(patterns)

    @field_validator("from_key", "to_key", mode="before")
    @classmethod
    def _key_as_text(cls, value: object) -> object:
        # YAML reads `from_key: 1000` as a number; a bound is the key's value as typed.
        return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value

    @field_validator("timezone")
    @classmethod
    def _timezone_known(cls, tz: str | None) -> str | None:
        if tz is not None:
            try:
                ZoneInfo(tz)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(f"unknown time zone {tz!r} (an IANA name such as Europe/Paris)") from None
        return tz

    @model_validator(mode="after")
    def _range_not_with_repair(self) -> ScheduledBackfillConfig:
        if self.repair_only and (self.from_key is not None or self.to_key is not None):
            raise ValueError("from_key/to_key are not for repair_only: reconciliation checks whole tables "
                             "and repairs only the chunks that differ")
        return self


class DagsterConfig(_Strict):
    """binlake extension: how the Dagster code location runs and watches the pipeline."""

    stream: DagsterStreamConfig = DagsterStreamConfig()
    # An idle table's offset (the stream's checkpoint, which covers it) is recorded at most this often.
    idle_offset_seconds: float = Field(300, gt=0)
    max_lag_seconds: float = Field(300, gt=0)  # the asset check `lag_under_bound` fails past this
    # When the nightly reconciliation (the checksum_parity checks, `binlake reconcile`) runs: a cron schedule.
    reconcile_cron: str = "0 2 * * *"
    # When the job binlake_maintenance runs, if its schedule is turned on (the stream maintains its
    # tables between batches anyway unless sink.maintenance.auto is false).
    maintenance_cron: str = "0 3 * * *"
    freshness: FreshnessConfig = FreshnessConfig()
    # Per table ("db.table", full-match regex): the first matching entry replaces `freshness`.
    table_freshness: dict[str, FreshnessConfig] = {}
    backfills: list[ScheduledBackfillConfig] = []  # scheduled backfills, one Dagster schedule each

    @field_validator("backfills")
    @classmethod
    def _names_unique(cls, entries: list[ScheduledBackfillConfig]) -> list[ScheduledBackfillConfig]:
        seen: dict[str, int] = {}
        for i, b in enumerate(entries):
            if b.name in seen:
                raise ValueError(f"[{i}].name: {b.name!r} is the name of [{seen[b.name]}] too: names must differ "
                                 f"(each is the schedule binlake_backfill_<name>)")
            seen[b.name] = i
        return entries

    @field_validator("table_freshness")
    @classmethod
    def _patterns_compile(cls, entries: dict[str, FreshnessConfig]) -> dict[str, FreshnessConfig]:
        return _compiled(entries)

    def freshness_for(self, qualified_name: str) -> FreshnessConfig:
        """The freshness settings of ``db.table``."""
        for pattern, f in self.table_freshness.items():
            if re.fullmatch(pattern, qualified_name):
                return f
        return self.freshness


class MetricsConfig(_Strict):
    """binlake extension: the stream's Prometheus endpoint (``metrics``; pipelines/stream/metrics.py):
    ``http://<host>:<port>/metrics`` while ``binlake stream``/``run`` or the Dagster stream job
    streams. Off unless ``port`` is set; on the loopback address unless ``host`` says otherwise."""

    port: int | None = Field(None, ge=1, le=65535)
    host: str = "127.0.0.1"


class BinlakeConfig(_Strict):
    pipeline: PipelineConfig
    source: SourceConfig
    sink: SinkConfig = SinkConfig()
    stream: StreamConfig = StreamConfig()
    routes: list[RouteConfig] = []
    spark: SparkConfig = SparkConfig()
    dagster: DagsterConfig = DagsterConfig()
    metrics: MetricsConfig = MetricsConfig()


def _substitute(node: object, where: str = "") -> object:
    """Replace ``${VAR}`` in string values after YAML parsing, so a secret never
    reaches a YAML error message."""
    if isinstance(node, dict):
        return {k: _substitute(v, f"{where}.{k}" if where else str(k)) for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute(v, f"{where}[{i}]") for i, v in enumerate(node)]
    if isinstance(node, str):
        missing = sorted({m for m in _VAR.findall(node) if m not in os.environ})
        if missing:
            raise ConfigError(f"{where}: environment variable(s) not set: {', '.join(missing)}")
        return _VAR.sub(lambda m: os.environ[m.group(1)], node)
    return node


def _format_errors(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            lines.append(f"{key}: unknown key")
        elif e["type"] == "missing":
            lines.append(f"{key}: required key missing")
        else:
            # The message, never the input value: the value may be a secret.
            lines.append(f"{key}: {e['msg']}")
    return "; ".join(lines)


def parse_config(data: object) -> BinlakeConfig:
    """Validate an already-loaded mapping into a BinlakeConfig (ConfigError on problems)."""
    if not isinstance(data, dict):
        raise ConfigError("configuration must be a mapping with pipeline, source, sink, ...")
    try:
        return BinlakeConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_errors(e)) from None


def load_config(path: str | Path) -> BinlakeConfig:
    """Read, substitute ``${VAR}`` and validate the YAML config at ``path``."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read config file {p}: {e.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        # Only the problem and its place: str(e) quotes the file's lines, which may hold a literal password.
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{p}: not valid YAML{where}: {getattr(e, 'problem', None) or 'syntax error'}") from None
    return parse_config(_substitute(data))
