"""User strategies that corrupt what a round trip must bring back, in structured ways.

Each moves the parameters honestly (``Pageable``) or moves no optimizer state, then
corrupts on load in a way the linear fingerprint before issue 22 could not see (each
docstring says why). Every run must fail with the verdict ``corrupted`` and exit 1.
Plugged in as ``tests.integration.corrupting_strategies:X``.
"""

import gc

import torch

from tests.integration.adversarial_strategies import Pageable, _buffers, _restore, _state

SIGN = -(1 << 63)
"""Bit 63 of an int64 word: the sign of the fourth bf16 (or second fp32) in it."""


class TwoSignBits(Pageable):
    """Flips bit 63 of param_data words 1,000 and 2,000 (one keyed block): the linear sum
    moved by 2**63 twice, 0 mod 2**64, whatever the key."""

    def load(self, models):
        super().load(models)
        words = next(_buffers(models)).param_data.view(torch.int64)
        words[1000] ^= SIGN
        words[2000] ^= SIGN


class EveryFourthWeightNegated(Pageable):
    """Negates bf16 elements 3, 7, 11, ... of every param_data: bit 63 of every word, an
    even number per block in the linear sum."""

    def load(self, models):
        super().load(models)
        for buf in _buffers(models):
            buf.param_data[3::4].neg_()


class RebindsParamData(Pageable):
    """Load gives each buffer a new tensor, ``buffer.param_data = host.cuda()`` (a common
    bug): bit-exact bytes, but every parameter still views the old, freed storage."""

    def load(self, models):
        for buf in _buffers(models):
            _restore(buf.grad_data)
            buf.grad_data.zero_()
            buf.param_data = self.copies[id(buf)].cuda()


class EveryOddExpAvgNegated:
    """Optimizer strategy that moves nothing and negates ``exp_avg`` elements 1, 3, 5, ...
    on load: fp32 pairs per word, bit 63 of every word."""

    key = "exp_avg"

    def offload(self, optimizers):
        pass

    def load(self, optimizers):
        for state in _state(optimizers):
            state[self.key].view(-1)[1::2].neg_()


class EveryOddMasterParamNegated(EveryOddExpAvgNegated):
    """The same on the precision-aware optimizer's fp32 ``master_param``."""

    key = "master_param"


class EveryOddMainParamNegated(EveryOddExpAvgNegated):
    """The same on the DistributedOptimizer's fp32 main params (classic Adam)."""

    def load(self, optimizers):
        for opt in optimizers:
            for part in getattr(opt, "chained_optimizers", None) or [opt]:
                for group in part.shard_fp32_from_float16_groups:
                    for main in group:
                        main.view(-1)[1::2].neg_()


def _distributed_optimizers():
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    return [o for o in gc.get_objects() if isinstance(o, DistributedOptimizer)]


class TwoUnreadRowsNegated(Pageable):
    """Negates two word-embedding rows that the batch never reads (their gradient is zero)
    in the bf16 parameter and in its fp32 main param, consistently: the loss of the next
    step is unchanged, so only the fingerprints can see it."""

    def __init__(self):
        super().__init__()
        self.rows = []

    def offload(self, models):
        if not self.rows:
            for chunk in models:
                for name, param in chunk.named_parameters():
                    if name.endswith("word_embeddings.weight"):
                        unread = (param.main_grad == 0).all(dim=1).nonzero().flatten()
                        self.rows.append((param, unread[:2].tolist()))
        super().offload(models)

    def load(self, models):
        super().load(models)
        for param, rows in self.rows:
            width = param.shape[1]
            for row in rows:
                param.detach()[row].neg_()
            for opt in _distributed_optimizers():
                mains = opt.shard_fp32_from_float16_groups
                for group, shards in zip(opt.model_float16_groups, mains, strict=True):
                    for model_param, main in zip(group, shards, strict=True):
                        if model_param is param and main is not None:
                            for row in rows:
                                main.view(-1)[row * width : (row + 1) * width].neg_()
