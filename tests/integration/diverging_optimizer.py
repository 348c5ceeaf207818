"""An optimizer strategy whose state diverges from the no-offload run inside a train phase,
where no parameter changes yet (issue 35, point 7). Plugged in as
``tests.integration.diverging_optimizer:X``.
"""

from tests.integration.adversarial_strategies import _state
from tests.integration.user_optimizer_offload import VerlOffload


class InfMomentWhereTheBatchDoesNotReach(VerlOffload):
    """Moves the optimizer state honestly (verl's functions); at its first offload it
    registers a step hook on each inner optimizer that, after the next step, sets one
    ``exp_avg_sq`` element to +inf where the gradient has been 0 in every step (a row the
    batch does not reach): Adam's update there is 0 / inf = 0, so no parameter and no loss
    changes, and the round trip of each cycle brings the state back as it was. Only the
    no-offload run's optimizer state differs: the run must fail as corrupted, naming the
    non-finite value."""

    def __init__(self):
        self.hooks = []

    def offload(self, optimizers):
        if not self.hooks:
            for opt in optimizers:
                for part in getattr(opt, "chained_optimizers", None) or [opt]:
                    inner = part.optimizer
                    self.hooks.append(inner.register_step_post_hook(self._poison))
        super().offload(optimizers)

    def _poison(self, optimizer, args, kwargs):
        for hook in self.hooks:
            hook.remove()
        for state in _state([_Wrapped(optimizer)]):
            moment, mean = state["exp_avg_sq"].view(-1), state["exp_avg"].view(-1)
            untouched = ((moment == 0) & (mean == 0)).nonzero()
            if untouched.numel():
                moment[int(untouched[0])] = float("inf")
                return


class _Wrapped:
    """One inner torch optimizer as ``_state`` walks a megatron one."""

    def __init__(self, inner):
        self.optimizer = inner
