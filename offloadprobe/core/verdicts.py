"""Every verdict rule, as pure functions over what was measured and how the process ended.

The same rules serve ``run``, ``compare``, ``repro``, ``show`` and the pytest plugin: a
row is ``ok`` only when its process ended as it said it would, the run completed, every
byte came back, it moved what it should have moved and it kept every budget. Anything
else names its own outcome and, where a phase is to blame, the phase and cycle.

The rules see records, never live objects: a saved record is judged exactly as it was.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable, Sequence
from dataclasses import replace

from offloadprobe.core.budgets import Breach, Budget, node_breaches
from offloadprobe.core.host_zero import negative_figures
from offloadprobe.core.limits import reclaim_words
from offloadprobe.core.outcomes import Failure, Verdict
from offloadprobe.core.owner_roles import bytes_of, part_word, word
from offloadprobe.core.records import ResidencyFact, RunRecord
from offloadprobe.core.residual import optimizer_left
from offloadprobe.core.roles import Role
from offloadprobe.core.units import format_bytes

OK = Verdict(kind="ok")

STAGING_FRACTION = 2
"""A parameter offload whose device drop, net of what the strategy holds otherwise, is
under 1/STAGING_FRACTION of ``param_data`` kept a copy on the device (a staging buffer kept
for reuse is less than that)."""
ALLOWANCE_FRACTION = 8
ALLOWANCE_FLOOR = 4 * 2**20


COPY_MARGIN = 64
"""Parameter bytes found by content may exceed a staging buffer's eighth by 1/COPY_MARGIN
of ``param_data`` (the anchors' grid: ``engine/model/param_copies.py``)."""


def staging_allowance(served: int) -> int:
    """Device bytes a strategy may keep beside what stays by design: a staging buffer of
    up to 1/ALLOWANCE_FRACTION of the part it serves (``served_bytes``), and
    ALLOWANCE_FLOOR for the framework's crumbs (a train step's small leftovers: 128 KiB
    seen on the H200)."""
    return ALLOWANCE_FLOOR + served // ALLOWANCE_FRACTION


def served_bytes(params: int, parts: int, optimizer: int) -> int:
    """The part a staging buffer serves: the parameters (``param_data`` and the parts
    outside it) where the offload moves them, else the optimizer state it moves. Never
    both: optimizer state (4 to 6 times the parameters) would make room for a whole copy
    of them."""
    return params + parts if params else optimizer


def copy_allowance(params: int) -> int:
    """Bytes of ``param_data``'s content that may stay on the device outside it: a staging
    buffer's eighth (``staging_allowance`` less the crumbs, which hold no parameters)."""
    return params // ALLOWANCE_FRACTION + params // COPY_MARGIN


def _copies_line(fact: ResidencyFact) -> str | None:
    """Parameters found by content outside their storage, beyond a staging buffer."""
    found = sum(fact.param_copies.values())
    if not fact.param_bytes_to_move or found <= copy_allowance(fact.param_bytes_to_move):
        return None
    where = sorted(fact.param_copies.items(), key=lambda kv: -kv[1])
    named = ", ".join(f"{name} {format_bytes(n)}" for name, n in where[:2])
    more = f" (+{len(where) - 2} more)" if len(where) > 2 else ""
    return (
        f"{word(fact.roles, Role.PARAMETERS)} {format_bytes(found)} of "
        f"{format_bytes(fact.param_bytes_to_move)} still "
        f"on device after offload, by content: a copy in {named}{more}"
    )


def judge(
    run: RunRecord | None,
    budgets: Iterable[Budget] = (),
    *,
    failure: Failure | None = None,
) -> tuple[Verdict, list[Breach]]:
    """The row's verdict and every budget it broke (the first one names the verdict).

    ``failure`` is how the measured process ended, where that decides the row (killed,
    exited early, inconsistent): it wins over whatever its record says."""
    if failure is not None:
        return failure.verdict, []
    if run is None:
        return Verdict(kind="crashed", detail="no record was produced"), []
    if run.failure is not None:
        return run.failure.verdict, []
    if run.integrity:
        more = f" (+{len(run.integrity) - 1} more)" if len(run.integrity) > 1 else ""
        return Verdict(
            kind="corrupted", detail=run.integrity[0] + more, reasons=tuple(run.integrity)
        ), []
    # every cycle, whatever the budgets: a budget only adds to these (never switches one off)
    problems = residency_problems(run.residency)
    if problems:
        return Verdict(kind="not offloaded", detail="; ".join(problems), reasons=problems), []
    hidden = hidden_problems(run.residency)
    if hidden:
        return Verdict(kind="not offloaded", detail="; ".join(hidden), reasons=hidden), []
    partly = partly_offloaded(run.residency)
    if partly:
        return Verdict(kind="partly offloaded", detail="; ".join(partly), reasons=partly), []
    if run.summary is None:
        return Verdict(kind="crashed", detail="no offload/load pair completed"), []
    below = negative_figures(run)
    if below:
        return Verdict(kind="inconsistent", detail="; ".join(below), reasons=below), []
    limited = limit_verdict(run)
    if limited is not None:
        return limited, []
    if run.world is not None:
        return _judge_ranks(run, list(budgets))
    breaches = [b for budget in budgets if (b := budget.check(run)) is not None]
    if breaches:
        more = f" (+{len(breaches) - 1} more)" if len(breaches) > 1 else ""
        return Verdict(kind=breaches[0].kind, detail=breaches[0].message + more), breaches
    return OK, []


LIMITED = ("offload", "load", "offload optimizer", "load optimizer")
"""The phases a host limit holds (from each offload to the end of its load)."""


def over_limit(run: RunRecord, limit: int) -> tuple[int, str, int] | None:
    """The first offload/load phase whose measured host peak over the run's baseline (the
    host at the first offload) tops ``limit``: (cycle, phase, the peak over the baseline)."""
    for p in run.phases:
        if p.phase in LIMITED:
            over = p.host.host_peak - run.baseline_host_bytes
            if over > limit:
                return p.cycle, p.phase, over
    return None


def limit_verdict(run: RunRecord) -> Verdict | None:
    """A run under a host limit (one process; a node's is judged by its node cgroup): a
    worker that left its limited group is ``escaped``, a limit someone else changed while
    it held ``inconsistent``; a measured host peak
    over it is ``over limit``, whatever the kernel did (it reclaims page cache before it
    kills, and a peak it let through is still over)."""
    record = run.host_limit
    if record is None or run.world is not None:
        return None
    for span in record.spans:
        if span.left_group:
            return Verdict(
                kind="escaped",
                detail="the measured process left its limited memory cgroup while the host "
                "limit held: neither the limit nor the group's figures saw what it held",
                cycle=span.cycle,
            )
        if span.limit_changed:
            now = format_bytes(span.limit_after_bytes) if span.limit_after_bytes else "no limit"
            return Verdict(
                kind="inconsistent",
                detail=f"the host limit read {now} at the load's end, not the "
                f"{format_bytes(span.limit_bytes)} set at its offload: it was changed "
                "meanwhile, the run's figures cannot be trusted",
                cycle=span.cycle,
            )
    hit = over_limit(run, record.size_bytes)
    if hit is None:
        return None
    cycle, phase, over = hit
    detail = (
        f"host peak {format_bytes(over)} over the usage at the first offload > the limit's "
        f"{format_bytes(record.size_bytes)}"
    )
    detail += "; not killed"  # a kill is the run's failure, judged before this rule
    held = record.span(cycle)
    if held is not None and held.reclaimed_bytes:
        words = reclaim_words(held.reclaimed_bytes, exact=held.reclaim_exact)
        detail += f": {words} instead"
    return Verdict(kind="over limit", detail=detail, cycle=cycle, phase=phase)


def expecting(verdict: Verdict, kind: str | None) -> Verdict:
    """A canary row's verdict: the failure the user said to expect passes (marked
    expected, exit 0); a row that passed instead is an ``unexpected pass``; any other
    verdict stays what it is, and says what was expected (exit 1)."""
    if kind is None or kind == "ok":
        return verdict
    if verdict.kind == kind:
        return replace(verdict, expected=True)
    if verdict.ok:
        return Verdict(kind="unexpected pass", detail=f"expected {kind}, but every check passed")
    detail = f"{verdict.detail}; expected {kind}" if verdict.detail else f"expected {kind}"
    return replace(verdict, detail=detail)


def _judge_ranks(run: RunRecord, budgets: list[Budget]) -> tuple[Verdict, list[Breach]]:
    """Several ranks: every rank's own record is judged; the first rank that is not ok
    names the row's verdict (budgets hold per rank); then each node's measured peak is
    held against the budgets that hold a node whole (``--max-host-peak``)."""
    assert run.world is not None
    for rank in run.world.ranks:
        verdict, breaches = judge(rank, budgets)
        if not verdict.ok:
            where = rank.place.rank if rank.place else "?"
            return Verdict(
                kind=verdict.kind,
                detail=f"rank {where}: {verdict.detail}",
                cycle=verdict.cycle,
                phase=verdict.phase,
                reasons=tuple(f"rank {where}: {r}" for r in verdict.reasons),
            ), breaches + (node_breaches(run, budgets) if breaches else [])
    nodes = node_breaches(run, budgets)
    if nodes:
        more = f" (+{len(nodes) - 1} more)" if len(nodes) > 1 else ""
        return Verdict(kind=nodes[0].kind, detail=nodes[0].message + more), nodes
    return OK, []


def cycle_residency_problems(fact: ResidencyFact) -> list[str]:
    """What one cycle's offload should have moved off the device and did not."""
    lines = []
    left = fact.param_bytes_left
    params = word(fact.roles, Role.PARAMETERS)
    if fact.param_bytes_to_move and left:
        lines.append(f"{params} {format_bytes(left)} still on device after offload")
    elif fact.param_bytes_to_move:
        # What the offload gave back for the parameters: its net device change, less what
        # the strategy made on the device when it was built (a buffer there could hold the
        # copy), less optimizer state it moved in the same phase, and less what the parts
        # outside the buffers gave back (the reference model, frozen parameters): each part
        # pays for itself, none for parameters kept on the device.
        paid = fact.built_on_device_bytes
        if not fact.moves_optimizer:
            paid += fact.optimizer_moved_bytes
        parts = parts_released(fact)
        gave = max(0, fact.param_offload_gave_bytes - paid - parts)
        if gave < fact.param_bytes_to_move // STAGING_FRACTION:
            less = [f"{format_bytes(paid)} the strategy holds otherwise"] if paid else []
            less += [f"{format_bytes(parts)} the parts outside {params} gave"] if parts else []
            lines.append(
                f"{params} freed, but the device gave back {format_bytes(gave)} net of "
                f"{format_bytes(fact.param_bytes_to_move)}"
                + (f" (less {' and '.join(less)})" if less else "")
                + " (a copy kept on the device?)"
            )
        copies = _copies_line(fact)
        if copies is not None:
            lines.append(copies)
    for part, nbytes in fact.parts_to_move.items():
        stayed = fact.left_by_owner.get(part, 0)
        if nbytes and stayed:
            lines.append(
                f"{part_word(fact.roles, part)} {format_bytes(stayed)} of "
                f"{format_bytes(nbytes)} still on device after offload"
            )
    if fact.moves_optimizer and fact.optimizer_state_bytes and not fact.optimizer_moved_bytes:
        lines.append(
            f"optimizer state {format_bytes(fact.optimizer_state_bytes)}: none of it left "
            "the device"
        )
    return lines


def parts_released(fact: ResidencyFact) -> int:
    """What the parts outside ``param_data`` the offload was to move gave back: each
    part's bytes less what the audit found of it on the device after the offload."""
    return sum(
        max(0, n - fact.left_by_owner.get(part, 0)) for part, n in fact.parts_to_move.items()
    )


def _once(lines: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(lines))


def residency_problems(facts: Sequence[ResidencyFact]) -> tuple[str, ...]:
    """Every cycle's residency problems, each line once, in the order first seen."""
    return _once(line for fact in facts for line in cycle_residency_problems(fact))


def partly_offloaded(facts: Sequence[ResidencyFact]) -> tuple[str, ...]:
    """An optimizer strategy that moves state and left some of it: each key, its bytes;
    a parameter strategy that moved ``param_data`` and left ``grad_data`` (beyond the
    staging allowance: room for a copy of the parameters, as a bare buffer holds none)."""
    lines = []
    for fact in facts:
        grads = bytes_of(fact.left_by_owner, fact.roles, Role.GRADIENTS)
        if fact.param_bytes_to_move and not fact.param_bytes_left and grads > fact.allowance_bytes:
            lines.append(
                f"{word(fact.roles, Role.GRADIENTS)} {format_bytes(grads)} still on device"
            )
        if not fact.moves_optimizer or not fact.optimizer_moved_bytes:
            continue  # moved nothing: the "not offloaded" rule's
        for key, nbytes in sorted(optimizer_left(fact).items(), key=lambda kv: -kv[1]):
            lines.append(f"{key} {format_bytes(nbytes)} still on device")
    return _once(lines)


def hidden_bytes(fact: ResidencyFact) -> int:
    """Device bytes no part owns after the offload: unreferenced tensors, what the audit
    found made during the offload, and what nothing names."""
    return sum(fact.unreferenced.values()) + fact.unattributed_bytes


GROWN = "grown beyond the tensors that own them"
"""The ledger's name for bytes of a known or framework storage beyond what its tensors
cover (or its size at the model's build): resized under them, they could hold anything."""


def hidden_problems(facts: Sequence[ResidencyFact]) -> tuple[str, ...]:
    """Device memory no part of the model or optimizer owns, left on the device after an
    offload beyond the staging allowance: a copy the strategy kept, a cache it filled."""
    lines = []
    for fact in facts:
        hidden = hidden_bytes(fact)
        if hidden <= fact.allowance_bytes:
            continue
        parts = [
            f"storages {format_bytes(n)} {when}"
            if when == GROWN
            else f"unreferenced device tensors {format_bytes(n)}, {when}"
            for when, n in fact.unreferenced.items()
            if n
        ]
        if fact.unattributed_bytes:
            where = (
                f", {format_bytes(fact.outside_allocator_bytes)} of it outside PyTorch's allocator"
                if fact.outside_allocator_bytes
                else ""
            )
            parts.append(f"unattributed {format_bytes(fact.unattributed_bytes)}{where}")
        lines.append(
            f"{format_bytes(hidden)} of device memory no part owns stayed on the device "
            f"after offload ({'; '.join(parts)}), beyond the staging allowance of "
            f"{format_bytes(fact.allowance_bytes)}"
        )
    return _once(lines[:1])


def ended(
    *,
    exit_code: int,
    wrote_result: bool,
    result_exit_code: int | None,
    result_failure: Failure | None,
    last_phase: tuple[int, str] | None,
    oom_kills: tuple[int | None, int | None] = (None, None),
) -> Failure | None:
    """How a measured process ended, when that decides its row; None when its record
    (and the rules above) do.

    - killed by a signal: ``killed``, naming the signal and, for SIGKILL, whether the
      memory cgroup recorded an OOM kill;
    - ended without writing its record: ``exited early`` (whatever its exit code: a
      strategy's ``sys.exit(0)`` or ``os._exit(0)`` is not a completed run);
    - a record whose own exit code is not the one the process ended with: ``inconsistent``
      (the record was rewritten after the worker wrote it, or the worker was made to exit
      otherwise).
    """
    cycle, phase = last_phase if last_phase else (None, None)
    if exit_code < 0:
        message = signal_message(-exit_code, *oom_kills)
        return Failure(
            kind="killed", message=message, cycle=cycle, phase=phase, exit_code=exit_code
        )
    if not wrote_result:
        message = f"the measured process exited with code {exit_code} before writing its record"
        return Failure(
            kind="exited early", message=message, cycle=cycle, phase=phase, exit_code=exit_code
        )
    if result_exit_code is not None and result_exit_code != exit_code:
        message = (
            f"the record says the measured process exits {result_exit_code}, but it exited "
            f"{exit_code}: the record cannot be trusted"
        )
        return Failure(
            kind="inconsistent", message=message, cycle=cycle, phase=phase, exit_code=exit_code
        )
    return result_failure


def signal_message(signum: int, oom_before: int | None = None, oom_after: int | None = None) -> str:
    """A signal's name, and for SIGKILL whether the cgroup recorded an OOM kill."""
    known = signum in signal.Signals._value2member_map_
    name = signal.Signals(signum).name if known else str(signum)
    if signum == signal.SIGKILL and oom_before is not None and oom_after is not None:
        if oom_after > oom_before:
            return f"{name}, cgroup OOM (oom_kill {oom_before} -> {oom_after})"
        return f"{name} (no OOM kill recorded by the cgroup)"
    if signum == signal.SIGKILL:
        return f"{name}, probably out of memory (no cgroup counter to confirm)"
    return f"signal {signum} ({name})"


def exit_code(verdicts: Iterable[Verdict]) -> int:
    """0 when every row passes; 2 when any row was bad input; else 1."""
    codes = {v.exit_code for v in verdicts}
    return 2 if 2 in codes else 1 if 1 in codes else 0
