"""A small but real training job to profile with ``offloadprobe attach``.

megatron-core's GPTModel (bf16, local layer spec) in megatron's DistributedDataParallel
with the DistributedOptimizer; each cycle trains a few steps, offloads the model's DDP
buffers to the host, runs a stand-in rollout, and loads them back. ``--offload`` picks
the pair of functions in ``offload_pairs.py``: ``pre`` (a fresh copy every offload),
``post`` (one kept host buffer) or ``mcore`` (megatron-core's own ``offload_to_cpu``).

    python examples/attach/train_offload.py --offload pre --payload-mib 48
    torchrun --nproc-per-node 2 examples/attach/train_offload.py --offload post

and under attach:

    offloadprobe attach --phase offload=offload_pairs:offload_model_pre \\
        --phase load=offload_pairs:load_model_pre -- \\
        python examples/attach/train_offload.py --offload pre

On CUDA it is plain megatron-core and torch (NCCL over ranks). On a host without a GPU
it borrows offloadprobe's CPU emulation of megatron's CUDA calls (``open_runtime("cpu")``,
gloo over ranks): the same megatron objects, every "device" tensor in host memory, held
at a constant size so that host figures stay the offload's own. ``--helper`` starts a
helper subprocess after the first offload that calls ``helper_task.pack_shard``.
At the end it prints one line ``example: {json}`` with the payload and what ran.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import offload_pairs
import torch

HERE = Path(__file__).resolve().parent
MIB = 1024**2


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--offload", choices=sorted(offload_pairs.PAIRS), default="post")
    p.add_argument(
        "--payload-mib", type=float, default=48.0, help="bf16 parameter bytes per rank, about (MiB)"
    )
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--cycles", type=int, default=3)
    p.add_argument("--train-steps", type=int, default=1)
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument(
        "--helper", action="store_true", help="start a helper subprocess after the first offload"
    )
    p.add_argument("--rollout-mib", type=float, default=8.0)
    p.add_argument("--seq-length", type=int, default=32, help="tokens per sample")
    return p.parse_args(argv)


def _width(payload: int, layers: int, vocab: int, seq: int, heads: int) -> int:
    """The hidden size whose bf16 parameters take about ``payload`` bytes."""
    a, b = 12 * layers, 13 * layers + vocab + seq
    hidden = (-b + math.sqrt(b * b + 4 * a * payload / 2)) / (2 * a)
    step = math.lcm(64, heads)
    return max(step, int(hidden) // step * step)


@contextlib.contextmanager
def _world(device: str):
    """Process group, megatron's parallel state and seeds; on CPU through offloadprobe's
    emulation. Yields the runtime (CPU) or None (CUDA)."""
    if device == "cpu":
        from offloadprobe.engine.runtime.session import open_runtime

        with open_runtime("cpu", seed=1234) as runtime:
            yield runtime
        return
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if "WORLD_SIZE" in os.environ:
        torch.distributed.init_process_group("nccl")
    else:  # one rank: an in-process store (a port picked free can be taken by then)
        torch.distributed.init_process_group(
            "nccl", store=torch.distributed.HashStore(), rank=0, world_size=1
        )
    parallel_state.initialize_model_parallel()
    torch.manual_seed(1234)
    model_parallel_cuda_manual_seed(1234)
    try:
        yield None
    finally:
        parallel_state.destroy_model_parallel()
        torch.distributed.destroy_process_group()


def build(args, emulated: bool):
    """GPTModel -> Float16Module -> DDP (distributed optimizer layout) -> optimizer."""
    from megatron.core.distributed import (
        DistributedDataParallel,
        DistributedDataParallelConfig,
        finalize_model_grads,
    )
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer.module import Float16Module
    from megatron.core.transformer.transformer_config import TransformerConfig

    vocab, seq, heads = 1024, args.seq_length, 8
    hidden = _width(int(args.payload_mib * MIB), args.layers, vocab, seq, heads)
    config = TransformerConfig(
        num_layers=args.layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        use_cpu_initialization=emulated,
        bf16=True,
        params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    gpt = GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_local_spec(),
        vocab_size=vocab,
        max_sequence_length=seq,
    )
    if not emulated:
        gpt.cuda()
    ddp = DistributedDataParallel(
        config=config,
        ddp_config=DistributedDataParallelConfig(
            grad_reduce_in_fp32=True, overlap_grad_reduce=False, use_distributed_optimizer=True
        ),
        module=Float16Module(config, gpt),
    )
    config.no_sync_func = ddp.no_sync
    config.finalize_model_grads_func = finalize_model_grads
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-4, bf16=True, use_distributed_optimizer=True),
        [ddp],
    )
    device = "cpu" if emulated else "cuda"
    gen = torch.Generator().manual_seed(7)
    batch = {
        "input_ids": torch.randint(0, vocab, (1, seq), generator=gen),
        "position_ids": torch.arange(seq).unsqueeze(0),
        "attention_mask": torch.ones(1, 1, seq, seq, dtype=torch.bool).triu(1),
        "labels": torch.randint(0, vocab, (1, seq), generator=gen),
    }
    return [ddp], optimizer, {k: v.to(device) for k, v in batch.items()}, seq


def train_step(models, optimizer, batch, seq) -> float:
    from megatron.core.pipeline_parallel import get_forward_backward_func

    def forward_step(data, model):
        item = next(data)
        out = model(
            item["input_ids"], item["position_ids"], item["attention_mask"], labels=item["labels"]
        )

        def loss(output):
            value = output.float().mean()
            return value, {"loss": value.detach()}

        return out, loss

    for chunk in models:
        chunk.zero_grad_buffer()
    optimizer.zero_grad()
    stored = get_forward_backward_func()(
        forward_step_func=forward_step,
        data_iterator=itertools.repeat(batch),
        model=models[0],
        num_microbatches=1,
        seq_length=seq,
        micro_batch_size=1,
        forward_only=False,
    )
    optimizer.step()
    return float(stored[-1]["loss"]) if stored else float("nan")


def _helper(nbytes: int) -> None:
    """A helper process that calls ``helper_task.pack_shard`` (a wrapped function)."""
    subprocess.run([sys.executable, str(HERE / "helper.py"), str(nbytes)], check=True)


def main(argv=None) -> None:
    args = _args(argv)
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    offload, load = offload_pairs.pair(args.offload)
    with _world(device) as runtime:
        models, optimizer, batch, seq = build(args, emulated=runtime is not None)
        payload = sum(
            b.param_data.numel() * b.param_data.element_size()
            for b in offload_pairs.buffers(models)
        )
        settle = runtime.settle if runtime is not None else (lambda: None)
        losses = []
        for cycle in range(args.cycles):
            for _ in range(args.train_steps):
                losses.append(train_step(models, optimizer, batch, seq))
            settle()
            offload(models)
            settle()
            offload_pairs.rollout(int(args.rollout_mib * MIB), device)
            settle()
            if args.helper and cycle == 0:
                _helper(payload // 4)
            load(models)
            settle()
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    record = {
        "rank": rank,
        "device": device,
        "offload": args.offload,
        "payload_bytes": payload,
        "cycles": args.cycles,
        "losses": losses,
    }
    # one write of the whole line: torchrun's ranks share the job's stdout, and print()
    # writes the newline apart (under PYTHONUNBUFFERED two ranks' lines can run together)
    sys.stdout.write(f"example: {json.dumps(record)}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
