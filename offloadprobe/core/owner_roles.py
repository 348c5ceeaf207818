"""The role of each owner a record names, read from the record.

A residency fact carries, per owner, its role (``ResidencyFact.roles``: the engine's
inventory, ``core.roles``), so the rules judge by role and their messages keep the
engine's own word (``param_data 12 MiB still on device`` for megatron-core, ``sharded_param
1.20 GiB still on device`` for FSDP2). Records written before owners carried roles were
megatron-core's: their owners' roles are :data:`BEFORE_ROLES`'s, and every other owner but
the audit's ``allocated during offload`` was optimizer state.

Torch-free.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from offloadprobe.core.roles import Role

BEFORE_ROLES = {
    "param_data": Role.PARAMETERS,
    "grad_data": Role.GRADIENTS,
    "frozen": Role.FROZEN,
    "ref_model": Role.REFERENCE,
}
"""The model's owners in records written before owners carried roles (megatron-core's)."""
UNOWNED = "allocated during offload"
"""The audit's owner of device storages an offload made that nothing reaches (no role)."""
MODEL_ROLES = (Role.PARAMETERS, Role.GRADIENTS, Role.FROZEN, Role.REFERENCE)
"""Roles of the model's own tensors (every other owned tensor is optimizer state)."""
PART_WORDS = {Role.FROZEN: "frozen parameters", Role.REFERENCE: "reference model"}
"""The model's parts beside its parameters, in words."""


def role_of(roles: Mapping[str, str], owner: str) -> Role | None:
    """The role of ``owner`` in a record whose roles are ``roles`` (None: no part's)."""
    if roles:
        value = roles.get(owner)
        return Role(value) if value is not None else None
    if owner == UNOWNED:
        return None
    return BEFORE_ROLES.get(owner, Role.OPTIMIZER)


def part_word(roles: Mapping[str, str], owner: str, words: Mapping[Role, str] = PART_WORDS) -> str:
    """A part's name in ``words`` by its owner's role (the owner's own word where none)."""
    role = role_of(roles, owner)
    return words.get(role, owner) if role is not None else owner


def owners_of(roles: Mapping[str, str], role: Role) -> list[str]:
    """The owners of ``role``, in the record's order."""
    if roles:
        return [owner for owner, value in roles.items() if value == role.value]
    return [owner for owner, value in BEFORE_ROLES.items() if value is role]


def word(roles: Mapping[str, str], role: Role) -> str:
    """The engine's word for ``role``'s owners (``param_data``; several joined by ``/``)."""
    found = owners_of(roles, role)
    return "/".join(found) if found else role.value


def bytes_of(by_owner: Mapping[str, int], roles: Mapping[str, str], *wanted: Role) -> int:
    """Bytes of ``by_owner`` whose owner's role is one of ``wanted``."""
    return sum(n for owner, n in by_owner.items() if role_of(roles, owner) in wanted)


def merged(all_roles: Iterable[Mapping[str, str]]) -> dict[str, str]:
    """Several facts' roles as one (a run's)."""
    found: dict[str, str] = {}
    for roles in all_roles:
        found.update(roles)
    return found
