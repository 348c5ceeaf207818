"""The parameter tensors one rank of a pipeline stage holds, in ``named_parameters()`` order.

The list follows megatron-core's local layer spec (``get_gpt_layer_local_spec``;
``SequentialMLP`` experts); ``tests/unit/test_layout.py`` checks it against a real
``GPTModel``. A model known only by parameter counts is spread evenly instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from offloadprobe.layout.inputs import (
    GptShape,
    Indivisible,
    LayoutError,
    ModelSpec,
    Parallelism,
    ParamCount,
)


@dataclass(frozen=True, kw_only=True, slots=True)
class ParamEntry:
    """One parameter tensor on one rank, in ``named_parameters()`` order."""

    name: str
    numel: int
    formula: str
    """How ``numel`` follows from the shape, e.g. ``(64+2*4)*128/4 * 4096``."""
    expert: bool = False
    shared_embedding: bool = False


def stage_layer_counts(num_layers: int, par: Parallelism) -> tuple[int, ...]:
    """Layers per pipeline stage (megatron ``get_num_layers_to_build``)."""
    first, last = par.first_stage_layers, par.last_stage_layers
    if first is None and last is None:
        if num_layers % par.pp:
            raise Indivisible(
                "pp",
                value_name="num_layers",
                value=num_layers,
                by="pp",
                divisor=par.pp,
                message=f"pp={par.pp} does not divide {num_layers} layers; set first/last layers",
            )
        return (num_layers // par.pp,) * par.pp
    rest, stages = (
        num_layers - (first or 0) - (last or 0),
        par.pp - (first is not None) - (last is not None),
    )
    if rest < 0 or stages < 0 or (stages and rest % stages) or (not stages and rest):
        raise LayoutError(
            "first_stage_layers",
            f"{num_layers} layers do not split as first={first}, last={last} over "
            f"pp={par.pp}; the layers left must split evenly over the middle stages",
        )
    middle = rest // stages if stages else 0
    counts = [middle] * par.pp
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    return tuple(counts)


def gpt_stage_parameters(shape: GptShape, par: Parallelism, pp_rank: int) -> tuple[ParamEntry, ...]:
    """The parameters one rank of ``pp_rank`` holds, in local-spec ``named_parameters()`` order."""
    _check_shape(shape, par)
    tp, h, kv = par.tp, shape.hidden_size, shape.head_dim
    glu = 2 if shape.swiglu else 1
    counts = stage_layer_counts(shape.num_layers, par)
    first_layer = sum(counts[:pp_rank])
    first, last = pp_rank == 0, pp_rank == par.pp - 1
    tied_copy = not shape.untie_embeddings_and_output_weights and par.pp > 1
    out: list[ParamEntry] = []

    def add(name: str, numel: int, formula: str, **flags: bool) -> None:
        out.append(ParamEntry(name=name, numel=numel, formula=formula, **flags))

    def norm(prefix: str, width: int, formula: str) -> None:
        add(f"{prefix}.weight", width, formula)
        if shape.normalization == "LayerNorm":
            add(f"{prefix}.bias", width, formula)

    def linear(prefix: str, rows: int, cols: int, rf: str, cf: str, bias: bool, **f: bool) -> None:
        add(f"{prefix}.weight", rows * cols, f"{rf} * {cf}", **f)
        if bias:
            add(f"{prefix}.bias", rows, rf, **f)

    if first:
        add(
            "embedding.word_embeddings.weight",
            shape.vocab_size // tp * h,
            f"{shape.vocab_size}/{tp} * {h}",
            shared_embedding=tied_copy and not last,
        )
        if shape.position_embedding == "learned_absolute":
            add(
                "embedding.position_embeddings.weight",
                shape.max_sequence_length * h,
                f"{shape.max_sequence_length} * {h}",
            )
    heads, groups, bias = shape.num_attention_heads, shape.query_groups, shape.add_bias_linear
    for local in range(counts[pp_rank]):
        p = f"decoder.layers.{local}"
        norm(f"{p}.input_layernorm", h, f"{h}")
        linear(
            f"{p}.self_attention.linear_proj",
            h,
            heads * kv // tp,
            f"{h}",
            f"{heads}*{kv}/{tp}",
            bias,
        )
        linear(
            f"{p}.self_attention.linear_qkv",
            (heads + 2 * groups) * kv // tp,
            h,
            f"({heads}+2*{groups})*{kv}/{tp}",
            f"{h}",
            bias or shape.add_qkv_bias,
        )
        if shape.qk_layernorm:
            norm(f"{p}.self_attention.q_layernorm", kv, f"{kv}")
            norm(f"{p}.self_attention.k_layernorm", kv, f"{kv}")
        norm(f"{p}.pre_mlp_layernorm", h, f"{h}")
        if not shape.is_moe_layer(first_layer + local):
            ffn = shape.ffn_hidden_size or 0
            linear(f"{p}.mlp.linear_fc1", glu * ffn // tp, h, f"{glu}*{ffn}/{tp}", f"{h}", bias)
            linear(f"{p}.mlp.linear_fc2", h, ffn // tp, f"{h}", f"{ffn}/{tp}", bias)
            continue
        experts, moe_ffn = shape.num_experts, shape.moe_ffn_hidden_size or 0
        linear(f"{p}.mlp.router", experts, h, f"{experts}", f"{h}", bias)
        etp = par.expert_tp
        for e in range(experts // par.ep):
            q = f"{p}.mlp.experts.local_experts.{e}"
            linear(
                f"{q}.linear_fc1",
                glu * moe_ffn // etp,
                h,
                f"{glu}*{moe_ffn}/{etp}",
                f"{h}",
                bias,
                expert=True,
            )
            linear(
                f"{q}.linear_fc2", h, moe_ffn // etp, f"{h}", f"{moe_ffn}/{etp}", bias, expert=True
            )
        if shared := shape.shared_expert_ffn_hidden_size:
            linear(
                f"{p}.mlp.shared_experts.linear_fc1",
                glu * shared // tp,
                h,
                f"{glu}*{shared}/{tp}",
                f"{h}",
                False,
            )
            linear(
                f"{p}.mlp.shared_experts.linear_fc2",
                h,
                shared // tp,
                f"{h}",
                f"{shared}/{tp}",
                False,
            )
    if last:
        norm("decoder.final_layernorm", h, f"{h}")
        if shape.untie_embeddings_and_output_weights or tied_copy:
            add(
                "output_layer.weight",
                shape.vocab_size // tp * h,
                f"{shape.vocab_size}/{tp} * {h}",
                shared_embedding=tied_copy,
            )
    return tuple(out)


def count_stage_parameters(model: ParamCount, par: Parallelism) -> tuple[ParamEntry, ...]:
    """Even split of a bare parameter count: one dense and one expert tensor per rank."""
    dense = model.total_params - model.expert_params
    out = [
        ParamEntry(
            name="dense",
            numel=-(-dense // (par.tp * par.pp)),
            formula=f"ceil({dense} / (tp*pp = {par.tp}*{par.pp}))",
        )
    ]
    if model.expert_params:
        out.append(
            ParamEntry(
                name="experts",
                numel=-(-model.expert_params // (par.ep * par.pp)),
                formula=f"ceil({model.expert_params} / (ep*pp = {par.ep}*{par.pp}))",
                expert=True,
            )
        )
    return tuple(out)


def check_model_fits(model: ModelSpec, par: Parallelism) -> None:
    """Raise ``LayoutError`` naming the field when megatron could not split ``model``."""
    problems = fit_problems(model, par)
    if problems:
        raise problems[0]


def fit_problems(model: ModelSpec, par: Parallelism) -> list[LayoutError]:
    """Every reason megatron could not split ``model`` over ``par`` (empty: it can)."""
    if not isinstance(model, GptShape):
        return []
    found: list[LayoutError] = []
    try:
        stage_layer_counts(model.num_layers, par)
    except LayoutError as err:
        found.append(err)
    return _shape_problems(model, par) + found


def _check_shape(shape: GptShape, par: Parallelism) -> None:
    problems = _shape_problems(shape, par)
    if problems:
        raise problems[0]


def _shape_problems(shape: GptShape, par: Parallelism) -> list[LayoutError]:
    checks = (
        ("num_attention_heads", shape.num_attention_heads, par.tp, "tp"),
        ("num_query_groups", shape.query_groups, par.tp, "tp"),
        ("vocab_size", shape.vocab_size, par.tp, "tp"),
        ("ffn_hidden_size", shape.ffn_hidden_size or 0, par.tp, "tp"),
        ("shared_expert_ffn_hidden_size", shape.shared_expert_ffn_hidden_size, par.tp, "tp"),
        ("num_experts", shape.num_experts, par.ep, "ep"),
        ("moe_ffn_hidden_size", shape.moe_ffn_hidden_size or 0, par.expert_tp, "expert_tp"),
    )
    return [
        Indivisible(field, value_name=field, value=value, by=by, divisor=divisor)
        for field, value, divisor, by in checks
        if value % divisor
    ]
