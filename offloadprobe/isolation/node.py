"""The node's memory cgroup for a run over several ranks, made by the parent."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from offloadprobe.measure.cgroup import CgroupUnavailable, create_group, node_group_name


def run_id_for(endpoint: str | None) -> str:
    """The rendezvous id: derived alike by every node from the shared endpoint (c10d keys
    its state by it), or a fresh one for one node."""
    if endpoint:
        return "op-" + hashlib.sha1(endpoint.encode()).hexdigest()[:10]
    return uuid.uuid4().hex[:12]


def node_group(run_id: str) -> tuple[Any, str | None]:
    """A new memory cgroup for the node's launcher and ranks, or None and why not."""
    try:
        group = create_group(node_group_name(run_id))
    except (CgroupUnavailable, OSError) as err:
        return None, str(err)
    return group, None
