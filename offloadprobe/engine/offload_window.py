"""A window of offloads, for the runner and for a sequence alike: what is taken before
them (while every part is on the device) and the residency fields after them.

Before: the ledger's first moment, the audit's snapshot of the device storages, the
anchors of the parameters' bytes (``engine/model/param_copies.py``) and the optimizer's
own state on the device. After: the ledger's split, the parts the offloads were to move,
the parameters' bytes found on the device by content, and the staging allowance of the
part a staging buffer serves (``core.verdicts.served_bytes``).
"""

from __future__ import annotations

from typing import Any

from offloadprobe.core.roles import Role
from offloadprobe.core.verdicts import served_bytes
from offloadprobe.engine.engine_state import inventory_of, part_bytes
from offloadprobe.engine.model import audit
from offloadprobe.engine.model.copy_owners import copies_on_device
from offloadprobe.engine.model.device_regions import device_bytes
from offloadprobe.engine.model.ledger import Hidden, fact_fields
from offloadprobe.engine.model.search_apart import ContentSearch, search_for
from offloadprobe.engine.transfers import claimed


def parts_to_move(model: Any, moves_params: bool) -> dict[str, int]:
    """The model's parts beside its parameters a parameter strategy must move."""
    return part_bytes(inventory_of(model)) if moves_params else {}


def param_buffers(model: Any) -> list[Any]:
    """The tensors of the model's parameters (what the content search anchors)."""
    return [h.tensor for h in inventory_of(model) if h.role is Role.PARAMETERS]


def make_search(runtime: Any, model: Any) -> ContentSearch:
    """The run's content search, made before the zero (``search_apart``)."""
    return search_for(runtime, param_buffers(model), device_bytes(runtime))


def window_start(state: Any) -> None:
    """Before a window's offloads (every part on the device): see the module. The last
    anchors stay where the buffers' bytes did not change."""
    model, own = state.model, state.ledger.own
    state.ledger.at_offload_start(model)
    state.ledger.at_window_start(model)
    state.snapshot = audit.snapshot_device_storage(model, own)
    if state.param_to_move:
        state.search.take(param_buffers(model), device_bytes(state.runtime))
    state.optimizer_bytes = sum(audit.optimizer_state_bytes_by_key(model, own).values())
    state.window_roles = roles_of(model)  # what an offload frees may leave the inventory


def window_fields(
    state: Any, hidden: Hidden, *, param_to_move: int, moves_optimizer: bool
) -> dict[str, Any]:
    """After a window's offloads: the residency fact's fields besides the audit's."""
    model = state.model
    moved = parts_to_move(model, state.info.moves_params and bool(param_to_move))
    copies = {}
    if param_to_move:
        prior = state.prior_regions
        same = prior.same_allocations(state.runtime)
        copies = copies_on_device(
            model,
            state.runtime,
            state.search,
            own=state.ledger.own,
            exclude=claimed(state),
            kept=lambda: prior.unchanged_in(same),
        )
    optimizer = state.optimizer_bytes if moves_optimizer else 0
    served = served_bytes(param_to_move, sum(moved.values()), optimizer)
    fields = {**fact_fields(hidden, served), "parts_to_move": moved, "param_copies": copies}
    fields["engine_readings"] = engine_readings(state)
    return {**fields, "roles": {**getattr(state, "window_roles", {}), **roles_of(model)}}


def engine_readings(state: Any) -> dict[str, int]:
    """The engine's own readings after an offload (``after_offload(strategies)`` on its
    training state, where it has one), its strategies asked where a storage went."""
    read = getattr(state.model, "after_offload", None)
    if read is None:
        return {}
    with state.runtime.strategy_code():
        return {k: int(v) for k, v in read([state.strategy, state.optimizer_strategy]).items()}


STAYS = (Role.BATCH, Role.FRAMEWORK)


def roles_of(model: Any) -> dict[str, str]:
    """Each owner of the model's inventory (but what stays by design) and its role."""
    return {h.owner: h.role.value for h in inventory_of(model) if h.role not in STAYS}


def left_numbers(left: dict[str, int], model: Any) -> tuple[int, int]:
    """Of what an offload left (``audit.bytes_by_key``): the parameters' bytes and the
    optimizer state's, by the owners' roles."""
    roles = roles_of(model)
    params = sum(n for owner, n in left.items() if roles.get(owner) == Role.PARAMETERS.value)
    return params, audit.optimizer_bytes_left(left, roles)
