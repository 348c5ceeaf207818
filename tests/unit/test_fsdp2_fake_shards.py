"""FSDP2 through PyTorch's fake process group on CPU, one rank at a time in this process:
every rank's shard of a real, uneven tensor has the rows and the padded storage the
presets' arithmetic says, and the engine's inventory names each shard by its storage."""

from __future__ import annotations

import torch
from torch import nn

from offloadprobe.core.roles import Role
from offloadprobe.engines.fsdp2.inventory import storage_bytes
from offloadprobe.engines.fsdp2.presets import ModelShape, shard_rows, shards_of
from offloadprobe.engines.fsdp2.ranks_fake import fake_rank
from offloadprobe.engines.fsdp2.state import build_state


def test_every_rank_of_an_uneven_linear_holds_its_chunk_in_padded_storage():
    from torch.distributed.fsdp import fully_shard

    held = []
    for rank in range(8):
        with fake_rank(rank, 8, device="cpu") as world:
            with torch.device("meta"):
                linear = nn.Linear(3584, 18943, bias=False)  # Qwen2.5-7B's MLP, one row short
            linear.to_empty(device="cpu")
            fully_shard(linear, mesh=world.mesh)
            shard = linear.weight._local_tensor
            held.append(shard.shape[0])
            rows, padded = shard_rows(18943, 8, rank)
            assert shard.shape == (rows, 3584)
            assert shard.untyped_storage().nbytes() == padded * 3584 * 4
            assert "fake process group" in (world.note or "")
    assert held == [2368] * 7 + [2367]
    assert sum(held) == 18943


def test_a_fake_rank_state_names_its_padded_shards_and_trains():
    shape = ModelShape.for_payload("plain", 1, vocab=1001)  # 1001 rows: uneven at 3 shards
    with fake_rank(2, 3, device="cpu") as world:
        state = build_state(shape, world, batch=1, seq=8)
        expected = {s.tensor.name: s for s in shards_of(shape, 3, 2)}
        params = [h for h in state.inventory() if h.role is Role.PARAMETERS]
        assert sorted(h.key.removesuffix("/sharded_param") for h in params) == sorted(expected)
        for h in params:
            s = expected[h.key.removesuffix("/sharded_param")]
            assert h.tensor.numel() == s.numel
            assert h.tensor.untyped_storage().nbytes() == s.padded_numel * 4, h.key
        assert expected["embed.weight"].rows == 333 and expected["embed.weight"].uneven
        state.train_step()  # collectives are no-ops: values are not a real run's
        found = state.inventory()
        owners = {h.owner for h in found}
        assert {"sharded_grad", "exp_avg", "exp_avg_sq", "step", "unsharded_param"} <= owners
        grads = [h for h in found if h.owner == "sharded_grad"]
        # one flat fp32 reduce-scatter output per fully_shard group: padded shards, packed
        flat = sum(s.padded_numel for s in expected.values()) * 4
        assert storage_bytes(grads) == flat
        assert len({h.tensor.untyped_storage()._cdata for h in grads}) == shape.blocks + 1
        moments = [h for h in found if h.owner in ("exp_avg", "exp_avg_sq")]
        assert storage_bytes(moments) == 2 * sum(s.numel for s in expected.values()) * 4


def test_the_root_parameters_a_forward_leaves_unsharded_are_named():
    # FSDP2's default: blocks reshard after forward, the root (embedding, final norm,
    # head) keeps its bf16 all-gather outputs until backward, or after a forward without
    # one (a no-grad log-prob pass) until something reshards it
    shape = ModelShape.for_payload("plain", 1, vocab=1001)
    root = {"embed.weight": 2 * 501, "norm.weight": 256, "head.weight": 2 * 501}  # padded rows

    def unsharded(state) -> dict[str, int]:
        return {
            h.key.removesuffix("/unsharded_param"): h.tensor.untyped_storage().nbytes()
            for h in state.inventory()
            if h.owner == "unsharded_param" and h.tensor.untyped_storage().nbytes()
        }

    with fake_rank(1, 2, device="cpu") as world:
        state = build_state(shape, world, batch=1, seq=8)
        assert unsharded(state) == {}
        logits = state.module(state.batch[0])
        held = {
            name: rows * (256 if name != "norm.weight" else 1) * 2 for name, rows in root.items()
        }
        assert unsharded(state) == held
        logits.float().sum().backward()
        assert unsharded(state) == {}
        with torch.no_grad():
            state.module(state.batch[0])
        assert unsharded(state) == held
        state.module.reshard()
        assert unsharded(state) == {}
