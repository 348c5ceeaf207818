"""A strategy that knows the probe's workspace cache (``--workspace-cache``) and frees it
on offload, as verl's fix for #6952 frees TransformerEngine's FP8 workspaces: the cache
is refilled by the next forward. Plugged in as ``tests.integration.workspace_strategies:X``.
"""

from __future__ import annotations

from offloadprobe.engine.model import workspace
from offloadprobe.engine.strategies.lazy import LazyStrategy


class LazyFreesWorkspaces(LazyStrategy):
    def offload(self, models):
        super().offload(models)
        workspace.clear()
