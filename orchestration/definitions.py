"""The binlake code location (``workspace.yaml``, ``dg``): the project's component folder,
whose ``binlake/defs.yaml`` declares a ``BinlakeComponent`` for the config named by
``BINLAKE_CONFIG`` (default ./binlake.yaml). Loading never connects to MySQL
(orchestration/component.py). Tests: tests/test_dagster_defs.py.
"""

from pathlib import Path

from dagster import load_from_defs_folder

defs = load_from_defs_folder(project_root=Path(__file__).resolve().parent.parent)
