"""binlake as a state-backed Dagster component (``defs.yaml``):

```yaml
type: orchestration.component.BinlakeComponent
attributes:
  config_path: binlake.yaml        # default: $BINLAKE_CONFIG, else ./binlake.yaml
```

Its state is the table catalog (pipelines/source_catalog.py): ``dg utils refresh-defs-state``
(or the job ``binlake_refresh_tables``, or the stream when it captures a new table)
discovers the captured tables and their schemas from MySQL and saves them; loading the
definitions reads only the saved catalog and the lake. State is kept on the local
filesystem and, unlike Dagster's default, not refreshed when ``dagster dev`` or ``dg``
start (``refresh_if_dev: false``), so the UI loads while MySQL is down.

Tests: tests/test_dagster_defs.py.
"""


from dataclasses import dataclass, field
from pathlib import Path

from dagster import ComponentLoadContext, Definitions, Resolvable, StateBackedComponent
from dagster.components import DefsStateConfig, DefsStateConfigArgs, ResolvedDefsStateConfig
from dagster.components.utils.project_paths import get_local_state_path
from dagster_shared.serdes.objects.models.defs_state_info import DefsStateManagementType

from cdc_core.config import load_config
from orchestration.build import build_binlake_definitions
from pipelines.source_catalog import discover
from resources.binlake import config_path as default_config_path


def _state_args() -> DefsStateConfigArgs:
    return DefsStateConfigArgs(management_type=DefsStateManagementType.LOCAL_FILESYSTEM, refresh_if_dev=False)


@dataclass
class BinlakeComponent(StateBackedComponent, Resolvable):
    """One binlake pipeline: an asset per captured table, the stream job, sensors and checks."""

    config_path: str | None = None
    defs_state: ResolvedDefsStateConfig = field(default_factory=_state_args)

    def resolved_config_path(self) -> str:
        return self.config_path or default_config_path()

    @property
    def defs_state_config(self) -> DefsStateConfig:
        name = load_config(self.resolved_config_path()).pipeline.name
        return DefsStateConfig.from_args(self.defs_state, default_key=f"BinlakeComponent[{name}]")

    def write_state_to_path(self, state_path: Path) -> None:
        discover(load_config(self.resolved_config_path())).write(state_path)

    def build_defs_from_state(self, context: ComponentLoadContext, state_path: Path | None) -> Definitions:
        if state_path is None and self.defs_state_config.management_type == DefsStateManagementType.LOCAL_FILESYSTEM:
            # Nothing saved yet: the stream and the refresh job write the catalog where the next load looks.
            state_path = get_local_state_path(self.defs_state_config.key, context.project_root)
        return build_binlake_definitions(self.resolved_config_path(), catalog_path=state_path)
