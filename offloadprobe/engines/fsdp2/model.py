"""The FSDP2 engine's model: a plain-PyTorch GPT-like decoder (embedding, blocks of
attention and a SwiGLU MLP behind RMSNorms, a final norm, an untied head) whose tensors
have a real model's shapes (``presets``), sharded with one ``fully_shard`` per block and
one for the root, in bf16 for compute and fp32 for the gradient reduction, AdamW over the
fp32 shards (the master weights)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from offloadprobe.engines.fsdp2.presets import BlockShape, ModelShape


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


class Attention(nn.Module):
    """Causal grouped-query attention (no rotary embedding: it holds no parameters)."""

    def __init__(self, shape: BlockShape) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = shape.heads, shape.kv_heads, shape.head_dim
        h, q, kv = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
        self.q = nn.Linear(h, q, bias=shape.qkv_bias)
        self.k = nn.Linear(h, kv, bias=shape.qkv_bias)
        self.v = nn.Linear(h, kv, bias=shape.qkv_bias)
        self.q_norm = RMSNorm(shape.head_dim) if shape.qk_norm else None
        self.k_norm = RMSNorm(shape.head_dim) if shape.qk_norm else None
        self.o = nn.Linear(q, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.q(x).view(batch, seq, self.heads, self.head_dim)
        k = self.k(x).view(batch, seq, self.kv_heads, self.head_dim)
        v = self.v(x).view(batch, seq, self.kv_heads, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o(out.transpose(1, 2).reshape(batch, seq, -1))


class Mlp(nn.Module):
    def __init__(self, shape: BlockShape) -> None:
        super().__init__()
        self.gate = nn.Linear(shape.hidden, shape.intermediate, bias=False)
        self.up = nn.Linear(shape.hidden, shape.intermediate, bias=False)
        self.down = nn.Linear(shape.intermediate, shape.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, shape: BlockShape) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(shape.hidden)
        self.attn = Attention(shape)
        self.mlp_norm = RMSNorm(shape.hidden)
        self.mlp = Mlp(shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Gpt(nn.Module):
    def __init__(self, shape: ModelShape) -> None:
        super().__init__()
        self.embed = nn.Embedding(shape.vocab, shape.block.hidden)
        self.blocks = nn.ModuleList(Block(shape.block) for _ in range(shape.blocks))
        self.norm = RMSNorm(shape.block.hidden)
        self.head = nn.Linear(shape.block.hidden, shape.vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def shard(
    model: Gpt,
    mesh: object,
    reshard_after_forward: bool | None = None,
    offload_policy: object = None,
) -> Gpt:
    """One ``fully_shard`` per block, then the root (embedding, final norm, head), with
    bf16 parameters for compute and fp32 gradient reduction; the fp32 shards stay the
    parameters (the master weights). ``reshard_after_forward``: FSDP2's own default
    (None) reshards the blocks after forward and keeps the root's parameters unsharded
    until backward (or, after a forward without one, until the next reshard); True or
    False for every ``fully_shard`` (verl passes its config's, True by default).
    ``offload_policy``: ``fully_shard``'s (``CPUOffloadPolicy`` for its rows); None: none."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, OffloadPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    kwargs = dict(
        mesh=mesh,
        mp_policy=policy,
        reshard_after_forward=reshard_after_forward,
        offload_policy=offload_policy if offload_policy is not None else OffloadPolicy(),
    )
    for block in model.blocks:
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    return model


def build_model(
    shape: ModelShape,
    mesh: object,
    device: str,
    seed: int,
    reshard_after_forward: bool | None = None,
    offload_policy: object = None,
) -> Gpt:
    """The sharded model, its initial values a function of ``seed`` and the device type
    alone (every rank draws the same whole model, then keeps its shards)."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = Gpt(shape)
    return shard(model, mesh, reshard_after_forward, offload_policy)


def make_batch(
    vocab: int, batch: int, seq: int, seed: int, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens and next-token labels, drawn on the host from ``seed`` (this rank's own)."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(vocab, (batch, seq + 1), generator=generator)
    return tokens[:, :-1].contiguous().to(device), tokens[:, 1:].contiguous().to(device)


def train_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, batch: tuple[torch.Tensor, torch.Tensor]
) -> float:
    """Forward, backward, AdamW step; the gradients stay (as after a user's step) until the
    next step sets them to None first."""
    tokens, labels = batch
    optimizer.zero_grad(set_to_none=True)
    logits = model(tokens)
    loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())
    loss.backward()
    optimizer.step()
    return float(loss.item())
