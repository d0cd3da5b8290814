"""A re-run of a finished snapshot, whole process: ``binlake snapshot`` as a user runs it,
once to do the snapshot and then again with nothing left to do.

    .venv/bin/python bench/noop_snapshot.py [--rows N] [--repeat K]

One run starts a throwaway MariaDB (devtools.local_mariadb), loads bench/snapshot.py's
7-column table (N rows), writes a config file and times ``binlake snapshot -c <file>`` as a
subprocess: the first run (Spark starts, every chunk is read) and ``--repeat`` re-runs
(nothing to read: no Spark session is started). The baseline of the same script is the first
run; the target for the re-run is under 3 s. Figures go to bench/out/noop_snapshot.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.snapshot import load_table, timed_cli_snapshot, write_cli_config  # noqa: E402
from devtools.local_mariadb import LocalMariaDB  # noqa: E402

OUT = REPO / "bench" / "out" / "noop_snapshot.json"
TARGET_SECONDS = 3.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3, help="re-runs with nothing to do")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="binlake-noop-bench-"))
    server = LocalMariaDB(server_id=1)
    try:
        server.start()
        print(f"loading {args.rows:,} rows ...", flush=True)
        load_table(server, args.rows)
        config = write_cli_config(server, work / "binlake.yaml", "bench_noop", work / "lake")
        first, _ = timed_cli_snapshot(config, server.password)
        print(f"  first run (Spark, every chunk read): {first:.2f} s", flush=True)
        reruns = []
        for i in range(args.repeat):
            reruns.append(timed_cli_snapshot(config, server.password)[0])
            print(f"  re-run {i + 1} (nothing to read): {reruns[-1]:.2f} s", flush=True)
    finally:
        server.cleanup()
    median = statistics.median(reruns)
    verdict = "PASS" if median < TARGET_SECONDS else "MISS"
    print(f"re-run median {median:.2f} s (target < {TARGET_SECONDS:.0f} s: {verdict}); "
          f"{median / first:.3f} of the first run; load average {os.getloadavg()[0]:.1f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rows": args.rows, "first_s": first, "reruns_s": reruns, "rerun_median_s": median,
                                    "target_s": TARGET_SECONDS, "pass": median < TARGET_SECONDS,
                                    "loadavg_end": [round(x, 2) for x in os.getloadavg()]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
