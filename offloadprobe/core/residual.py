"""What an offload left on the device, held against what it was to move: the figure
``--max-gpu-residual`` (``max_gpu_residual=``) judges.

The figure is the one the budget has always read (on CUDA PyTorch's allocated bytes
after the offload over those before the model existed; in CPU emulation every byte the
residency audit found and the device memory no part owns that the ledger found, made
whenever), less only what that offload was not to move, by the record's own facts, never
by a strategy's name:

- optimizer state, where no optimizer strategy moves it at that offload
  (``--optimizer-strategy none``, or a ``--sequence`` step that leaves it loaded): the
  state the audit found left, up to the state the optimizer held on the device just
  before the offload (what the offload made there counts);
- the model's own tensors (``param_data``, ``grad_data``, frozen parameters, the
  reference model) at a ``--sequence`` step that leaves the parameters loaded, where
  the parameter strategy moves them at other steps. Under ``--strategy none`` they
  always count.

Every audited offload is judged, and the last offload by the summary's figure too: the
worst offload breaks the budget, so a budget never reads less than before but for what
stayed by design. A budget only adds to the rules of ``core.verdicts``, which judge every
offload with or without one: device bytes still holding parameters, memory no part owns
and state an optimizer strategy left are failures whatever the budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from offloadprobe.core.owner_roles import MODEL_ROLES, bytes_of, role_of
from offloadprobe.core.records import PhaseRecord, ResidencyFact, RunRecord, RunSummary
from offloadprobe.core.roles import Role
from offloadprobe.core.units import format_bytes

UNOWNED = "allocated during offload"
"""The audit's owner of device storages an offload made that nothing in the model reaches
(counted with the unreferenced tensors, never as optimizer state: it has no role)."""
GPU = "GPU left after offload"
AUDITED = "left on device (audited, CPU emulation)"


def optimizer_left(fact: ResidencyFact) -> dict[str, int]:
    """Optimizer state the audit found on the device after the offload, by key."""
    return {
        key: nbytes
        for key, nbytes in fact.left_by_owner.items()
        if nbytes and role_of(fact.roles, key) is Role.OPTIMIZER
    }


def not_to_move(fact: ResidencyFact, *, moves_params: bool) -> dict[str, int]:
    """What this offload was not to move and left on the device, by part (see above)."""
    kept = {}
    if not fact.moves_optimizer:
        state = min(sum(optimizer_left(fact).values()), max(0, fact.optimizer_state_bytes))
        if state:
            kept["optimizer state"] = state
    if moves_params and not fact.param_bytes_to_move:
        model = bytes_of(fact.left_by_owner, fact.roles, *MODEL_ROLES)
        if model:
            kept["parameters"] = model
    return kept


@dataclass(frozen=True, kw_only=True, slots=True)
class Residual:
    """One offload's residual: the figure, less what it was not to move."""

    left_bytes: int
    """The figure as measured (everything left)."""
    what: str
    """``GPU left after offload`` or ``left on device (audited, CPU emulation)``."""
    cycle: int | None = None
    """The offload's cycle (its step, in a sequence); None: the last offload."""
    step: bool = False
    """``cycle`` is a sequence's step number."""
    not_counted: dict[str, int] = field(default_factory=dict)

    @property
    def bytes(self) -> int:
        return max(0, self.left_bytes - sum(self.not_counted.values()))

    def text(self, limit_bytes: int) -> str:
        """``left on device (audited, CPU emulation) 8.00 MiB > 0 B``, the offload when
        it is not the last, and what was not counted."""
        where = ""
        if self.cycle is not None:
            where = f" after {'step' if self.step else 'cycle'} {self.cycle}'s offload"
        kept = ", ".join(f"{part} {format_bytes(n)}" for part, n in self.not_counted.items())
        note = f" (not counted: {kept}, which this offload was not to move)" if kept else ""
        return f"{self.what} {format_bytes(self.bytes)} > {format_bytes(limit_bytes)}{where}{note}"


def _summary_figure(s: RunSummary) -> tuple[int | None, str]:
    if s.gpu_left_after_offload_bytes is not None:
        return s.gpu_left_after_offload_bytes, GPU
    if s.left_after_offload_bytes_by_key is not None:
        return sum(s.left_after_offload_bytes_by_key.values()), AUDITED
    return None, ""


def _after(run: RunRecord, cycle: int) -> PhaseRecord | None:
    """The last offload phase of ``cycle`` (of a sequence's step): the reading after it."""
    offloads = [p for p in run.phases if p.cycle == cycle and p.phase.startswith("offload")]
    return offloads[-1] if offloads else None


TRAIN_MADE = "made during train"
"""The ledger's name for live tensors no part reaches that a train step made (the
framework's: megatron's buffers of the first forward, 32 KiB on the probe model)."""


def audited_left(fact: ResidencyFact) -> int:
    """CPU emulation's figure for one offload: every byte the audit found, and device
    memory no part owns that the strategy could have made (the ledger's unreferenced
    tensors made before the first train step or during the moves, storages grown under
    their tensors, unattributed bytes: they hold what the audit calls allocated during
    the offload and what was made before it), as PyTorch's allocated bytes hold it on a
    GPU. What the train steps made is the framework's and is not counted here."""
    owned = sum(n for owner, n in fact.left_by_owner.items() if owner != UNOWNED)
    made = sum(n for when, n in fact.unreferenced.items() if when != TRAIN_MADE)
    hidden = made + fact.unattributed_bytes
    return owned + max(fact.left_by_owner.get(UNOWNED, 0), hidden)


def _fact_figure(run: RunRecord, fact: ResidencyFact, gpu: bool) -> tuple[int, str]:
    after = _after(run, fact.cycle) if gpu else None
    if after is not None and after.gpu is not None and run.gpu_baseline_bytes is not None:
        return after.gpu.allocated_after - run.gpu_baseline_bytes, GPU
    return audited_left(fact), AUDITED


def residuals(run: RunRecord) -> list[Residual]:
    """The last offload's residual (the summary's figure), then every audited offload's,
    in order; empty where neither was measured (no GPU reading, no audit)."""
    if run.summary is None:
        return []
    left, what = _summary_figure(run.summary)
    moves_params = any(f.param_bytes_to_move for f in run.residency)
    found = []
    if left is not None:
        last = run.residency[-1] if run.residency else None
        kept = not_to_move(last, moves_params=moves_params) if last is not None else {}
        found.append(Residual(left_bytes=left, what=what, not_counted=kept))
    for fact in run.residency:
        figure, named = _fact_figure(run, fact, gpu=what == GPU)
        found.append(
            Residual(
                left_bytes=figure,
                what=named,
                cycle=fact.cycle,
                step=bool(run.sequence),
                not_counted=not_to_move(fact, moves_params=moves_params),
            )
        )
    return found


def breaking(run: RunRecord, limit_bytes: int) -> Residual | None:
    """The residual over ``limit_bytes``: the last offload's when it is, else the first
    audited offload's that is; None when every one holds."""
    over = [r for r in residuals(run) if r.bytes > limit_bytes]
    return over[0] if over else None
