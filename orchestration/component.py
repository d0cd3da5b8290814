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
filesystem.

In Dagster's dev mode (``dagster dev``, ``dg``), the first load of a code server refreshes
the catalog when the source answers within ``DEV_CONNECT_TIMEOUT`` seconds, so the first
``dagster dev`` shows the tables without a ``dg utils refresh-defs-state`` before it; when
the source does not answer, the stored catalog is used as it is (none: no table assets
yet), so the UI loads while MySQL is down. Dagster's own ``refresh_if_dev`` is off: it
deletes the stored state before it asks the source, and fails the load when the source is down.
Runs and deployed code servers (not dev mode) never refresh at load.

Tests: tests/test_dagster_defs.py (the stored catalog with the source down, ``dg`` in dev
mode), tests/test_make_ui.py (the first ``dagster dev`` with no stored catalog shows the tables).
"""


import logging
from dataclasses import dataclass, field
from pathlib import Path

from dagster import ComponentLoadContext, Definitions, Resolvable, StateBackedComponent
from dagster._core.definitions.definitions_load_context import DefinitionsLoadContext, DefinitionsLoadType
from dagster._utils.env import using_dagster_dev
from dagster.components import DefsStateConfig, DefsStateConfigArgs, ResolvedDefsStateConfig
from dagster.components.utils.project_paths import get_local_state_path
from dagster_shared.serdes.objects.models.defs_state_info import DefsStateManagementType

from cdc_core.config import load_config
from orchestration.build import build_binlake_definitions
from pipelines.source_catalog import SourceCatalog, discover
from resources.binlake import config_path as default_config_path

log = logging.getLogger(__name__)

DEV_CONNECT_TIMEOUT = 5  # seconds the dev-mode refresh waits for the source before using the stored catalog


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

    def build_defs(self, context: ComponentLoadContext) -> Definitions:
        if (using_dagster_dev() and DefinitionsLoadContext.get().load_type == DefinitionsLoadType.INITIALIZATION
                and self.defs_state_config.management_type == DefsStateManagementType.LOCAL_FILESYSTEM):
            self._refresh_in_dev(get_local_state_path(self.defs_state_config.key, context.project_root))
        return super().build_defs(context)

    def _refresh_in_dev(self, state_path: Path) -> None:
        """Discover the tables into ``state_path`` if the source answers; else keep what is stored there."""
        cfg = load_config(self.resolved_config_path())
        try:
            catalog = discover(cfg, connect_timeout=DEV_CONNECT_TIMEOUT)
        except Exception as e:  # noqa: BLE001 - the source may be down: the stored catalog serves
            stored = SourceCatalog.read(state_path)
            log.warning("binlake: the source did not answer (%s: %s); %s", type(e).__name__, e,
                        f"using the table catalog discovered at {stored.discovered_at}" if stored else
                        "no table catalog yet: no table assets until `dg utils refresh-defs-state` "
                        "(or a reload once the source answers)")
            return
        catalog.write(state_path)  # atomic: a load never reads half a catalog
        log.info("binlake: table catalog refreshed from the source: %s", ", ".join(catalog.names) or "no tables")

    def build_defs_from_state(self, context: ComponentLoadContext, state_path: Path | None) -> Definitions:
        if state_path is None and self.defs_state_config.management_type == DefsStateManagementType.LOCAL_FILESYSTEM:
            # Nothing saved yet: the stream and the refresh job write the catalog where the next load looks.
            state_path = get_local_state_path(self.defs_state_config.key, context.project_root)
        return build_binlake_definitions(self.resolved_config_path(), catalog_path=state_path)
