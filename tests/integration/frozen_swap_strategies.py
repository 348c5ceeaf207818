"""A strategy that hides a corruption of the frozen parameters from a check that reads
the parameters saved at build instead of the modules (``--frozen-fraction``).

``SwapsFrozenForNegated``: ``lazy``, which moves every frozen parameter bit for bit and
restores it in place; then the load installs a negated copy, a new ``nn.Parameter``, in
each module's ``_parameters`` where a frozen one was: the model computes with the
negated weights, the originals stay untouched. Before the next offload the originals go
back, so ``lazy`` moves them again.
"""

from __future__ import annotations

import torch

from offloadprobe.engine.strategies.lazy import LazyStrategy


class SwapsFrozenForNegated(LazyStrategy):
    def __init__(self, runtime):
        super().__init__(runtime)
        self._originals = []

    def offload(self, models):
        for module, name, original in self._originals:
            module._parameters[name] = original
        self._originals = []
        super().offload(models)

    def load(self, models):
        super().load(models)
        ddp = [chunk for chunk in models if isinstance(getattr(chunk, "buffers", None), list)]
        for chunk in ddp:
            for module in chunk.modules():
                for name, param in list(module._parameters.items()):
                    if param is None or param.requires_grad:
                        continue
                    negated = torch.nn.Parameter(-param.detach().clone(), requires_grad=False)
                    module._parameters[name] = negated
                    self._originals.append((module, name, param))
