"""Benchmarks that compare checkouts: one throwaway MariaDB loaded once, then a child process per run
and checkout (the calling script, run with that checkout's code on its path), the checkouts alternating
so that the machine's drift falls on all alike. Used by row_decode.py and fold.py."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def compare(p: argparse.ArgumentParser, script: str, load: Callable[[object, argparse.Namespace], dict],
            measure: Callable[..., dict], on_run: Callable[[int, Path, dict], None] | None = None,
            ) -> tuple[argparse.Namespace, dict[str, list[dict]]]:
    """Parse ``p`` (with ``--repeat``; ``--tree`` and the child's argument added here). In a child: print
    ``measure(**what load returned, port, password)`` as JSON and exit. Else start a MariaDB, ``load`` it,
    run ``script`` as a child per repeat and tree (``on_run`` told each result) and return the arguments
    and each tree's results in run order."""
    p.add_argument("--tree", action="append", type=Path, help="a checkout to measure (repeatable)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(measure(**json.loads(args.child))))
        sys.exit(0)
    sys.path.insert(0, str(REPO))
    from devtools.local_mariadb import LocalMariaDB

    trees = args.tree or [REPO]
    server = LocalMariaDB(server_id=1).start()
    results: dict[str, list[dict]] = {str(t): [] for t in trees}
    try:
        child = json.dumps({"port": server.port, "password": server.password, **load(server, args)})
        for k in range(args.repeat):
            for tree in trees:
                env = {**os.environ, "PYTHONPATH": str(tree)}
                r = subprocess.run([sys.executable, script, "--child", child], env=env, check=True,
                                   capture_output=True, text=True, cwd=tree)
                results[str(tree)].append(json.loads(r.stdout))
                if on_run is not None:
                    on_run(k, tree, results[str(tree)][-1])
    finally:
        server.cleanup()
    return args, results
