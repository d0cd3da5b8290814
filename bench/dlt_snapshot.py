"""The dlt baseline of bench/snapshot.py: one MySQL table into a Delta table in a local folder
with dlt, set up as dlt's docs recommend for a large table. Runs in its own venv
(bench/.dlt-venv, made by bench/snapshot.py on first use), never with binlake's packages.

    bench/.dlt-venv/bin/python bench/dlt_snapshot.py --database bench --table t --dest /tmp/lake \
        --partitions 4 --workdir /tmp/dlt-work        # password in BINLAKE_BENCH_PASSWORD

The settings (dlt 1.x, docs "sql_database: configuration", "performance"):
- ``sql_database(backend="connectorx")``: Arrow tables straight from connectorx, the fastest
  backend; ``backend_kwargs`` ``partition_on`` the integer key with ``partition_num`` ranges
  read concurrently by connectorx (dlt passes them to ``connectorx.read_sql``): the
  "connectorx backend, partitioned" baseline; ``reflection_level="full_with_precision"``
  keeps DECIMAL precision and VARCHAR lengths;
- ``.parallelize()`` on the source and ``EXTRACT__WORKERS`` / ``NORMALIZE__WORKERS`` /
  ``LOAD__WORKERS`` set to the partition count (several workers in each stage);
- ``loader_file_format="parquet"``, ``table_format="delta"`` on the ``filesystem``
  destination (delta-rs writes the Delta table), ``write_disposition="replace"``.

Prints one JSON line: the rows dlt reports as loaded and the seconds of each stage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    t_process = time.perf_counter()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--user", default="root")
    ap.add_argument("--database", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--key", default="id", help="integer column connectorx partitions on")
    ap.add_argument("--dest", required=True, help="local folder: the Delta table is <dest>/<dataset>/<table>")
    ap.add_argument("--dataset", default="bench")
    ap.add_argument("--partitions", type=int, default=4, help="connectorx partition_num and dlt workers")
    ap.add_argument("--workdir", required=True, help="dlt's pipelines_dir (its state and load packages)")
    args = ap.parse_args(argv)
    # dlt reads its settings from the environment; set before it is imported
    for stage in ("EXTRACT", "NORMALIZE", "LOAD"):
        os.environ.setdefault(f"{stage}__WORKERS", str(args.partitions))
    os.environ.setdefault("RUNTIME__LOG_LEVEL", "WARNING")

    import dlt
    from dlt.destinations import filesystem
    from dlt.sources.sql_database import sql_database

    password = os.environ["BINLAKE_BENCH_PASSWORD"]
    url = f"mysql+pymysql://{args.user}:{password}@{args.host}:{args.port}/{args.database}"
    t_import = time.perf_counter() - t_process
    source = sql_database(
        url,
        table_names=[args.table],
        backend="connectorx",
        reflection_level="full_with_precision",
        backend_kwargs={"partition_on": args.key, "partition_num": args.partitions},
    ).parallelize()
    pipeline = dlt.pipeline(pipeline_name="bench_dlt", pipelines_dir=args.workdir,
                            destination=filesystem(bucket_url=os.path.abspath(args.dest)),
                            dataset_name=args.dataset)
    stages: dict[str, float] = {"import_s": t_import}
    t0 = time.perf_counter()
    pipeline.extract(source, write_disposition="replace", table_format="delta", loader_file_format="parquet")
    stages["extract_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    pipeline.normalize()
    stages["normalize_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    info = pipeline.load()
    stages["load_s"] = time.perf_counter() - t0
    info.raise_on_failed_jobs()
    rows = pipeline.last_trace.last_normalize_info.row_counts.get(args.table, 0)
    print(json.dumps({"rows": rows, "stages": stages,
                      "delta_path": os.path.join(os.path.abspath(args.dest), args.dataset, args.table)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
