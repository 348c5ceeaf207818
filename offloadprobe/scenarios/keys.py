"""Every key a scenario file may hold: its table, its type, when it is needed, its default
and what it means, declared once.

The reader (``schema.py``) takes each table's valid keys from here, so a key it accepts is
a key listed here; ``[repro]``'s run options come from the option model
(``core.options``, the scenario keys), as they do for the reader. ``markdown()`` renders
``docs/scenario-keys.md``; ``tools/scenario_keys.py`` writes it and a test keeps the file
equal to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from offloadprobe.layout.inputs import DTYPE_BYTES

INTEGER, BOOLEAN, STRING, SIZE = "integer", "boolean", "string", 'size ("64MiB")'


@dataclass(frozen=True, kw_only=True, slots=True)
class Key:
    """One key of one table."""

    name: str
    kind: str
    """``integer``, ``boolean``, ``string``, a size with its unit, or ``one of: ...``."""
    doc: str
    default: str = ""
    """What an absent key means; empty where it has to be given (``needed`` says when)."""
    needed: str = ""
    """When the key must be given: ``yes``, or the condition in words; empty: optional."""


def _one_of(options: tuple[str, ...]) -> str:
    return "one of " + ", ".join(f'"{o}"' for o in options)


PARAM_DTYPES = ("bfloat16", "float16", "float32")
STATE_DTYPES = tuple(DTYPE_BYTES)

SHAPE: tuple[Key, ...] = (
    Key(name="num_layers", kind=INTEGER, doc="Transformer layers.", needed="for a shape"),
    Key(name="hidden_size", kind=INTEGER, doc="Model width.", needed="for a shape"),
    Key(name="num_attention_heads", kind=INTEGER, doc="Query heads.", needed="for a shape"),
    Key(
        name="vocab_size",
        kind=INTEGER,
        doc="Vocabulary as the model is built (padded, if the trainer pads it).",
        needed="for a shape",
    ),
    Key(
        name="kv_channels",
        kind=INTEGER,
        doc="Head dimension (`head_dim` in a Hugging Face config). Not derived: "
        "hidden_size / num_attention_heads is right only for models whose config has no "
        "head_dim (Qwen3-235B-A22B: 4096 / 64 = 64, its head_dim is 128).",
        needed="for a shape",
    ),
    Key(
        name="num_query_groups",
        kind=INTEGER,
        doc="Key/value heads (GQA, `num_key_value_heads`); must divide num_attention_heads.",
        default="num_attention_heads",
    ),
    Key(
        name="ffn_hidden_size",
        kind=INTEGER,
        doc="Dense MLP width (`intermediate_size`).",
        needed="when any layer is dense",
    ),
    Key(name="num_experts", kind=INTEGER, doc="Routed experts per MoE layer.", default="0"),
    Key(
        name="moe_ffn_hidden_size",
        kind=INTEGER,
        doc="Width of one routed expert (`moe_intermediate_size`).",
        needed="with num_experts",
    ),
    Key(
        name="num_dense_layers",
        kind=INTEGER,
        doc="With experts: the first layers that keep a dense MLP (megatron `moe_layer_freq`).",
        default="0",
    ),
    Key(
        name="shared_expert_ffn_hidden_size",
        kind=INTEGER,
        doc="Width of the shared expert (`moe_shared_expert_intermediate_size`); 0: none.",
        default="0",
    ),
    Key(name="swiglu", kind=BOOLEAN, doc="Gated MLPs: fc1 is twice as wide.", default="true"),
    Key(
        name="untie_embeddings_and_output_weights",
        kind=BOOLEAN,
        doc="A separate output layer.",
        default="true",
    ),
    Key(
        name="normalization",
        kind=_one_of(("RMSNorm", "LayerNorm")),
        doc="LayerNorm adds a bias next to every norm weight.",
        default='"RMSNorm"',
    ),
    Key(name="qk_layernorm", kind=BOOLEAN, doc="Norms on queries and keys.", default="false"),
    Key(name="add_bias_linear", kind=BOOLEAN, doc="Biases on the linear layers.", default="false"),
    Key(name="add_qkv_bias", kind=BOOLEAN, doc="Biases on QKV only.", default="false"),
    Key(
        name="position_embedding",
        kind=_one_of(("rope", "learned_absolute")),
        doc="Rotary, or a learned position table.",
        default='"rope"',
    ),
    Key(
        name="max_sequence_length",
        kind=INTEGER,
        doc="Rows of the learned position table.",
        needed='with position_embedding = "learned_absolute"',
    ),
)

TABLES: dict[str, tuple[str, tuple[Key, ...]]] = {
    "model": (
        "The model: a GPT/MoE shape (the keys below `params`), or parameter counts alone "
        "(`params`, `expert_params`), not both.",
        (
            Key(name="name", kind=STRING, doc="The model's name, for the reader."),
            Key(
                name="dtype",
                kind=_one_of(PARAM_DTYPES),
                doc="Parameter dtype.",
                default='"bfloat16"',
            ),
            Key(
                name="params",
                kind=INTEGER,
                doc="Total parameters, spread evenly over the layers (instead of a shape).",
                needed="without a shape",
            ),
            Key(
                name="expert_params",
                kind=INTEGER,
                doc="Routed-expert parameters inside params (with params only).",
                default="0",
            ),
            Key(
                name="moe_router_topk",
                kind=INTEGER,
                doc="Experts per token: accepted for the reader, no effect on buffer sizes.",
            ),
            *SHAPE,
        ),
    ),
    "parallelism": (
        "Megatron's parallel sizes; tp x pp x dp GPUs fill whole nodes.",
        (
            Key(name="tp", kind=INTEGER, doc="Tensor-parallel size.", needed="yes"),
            Key(name="pp", kind=INTEGER, doc="Pipeline-parallel size.", needed="yes"),
            Key(name="dp", kind=INTEGER, doc="Data-parallel size.", needed="yes"),
            Key(name="gpus_per_node", kind=INTEGER, doc="GPUs per node.", needed="yes"),
            Key(
                name="ep",
                kind=INTEGER,
                doc="Expert-parallel size; ep must divide tp x dp and num_experts.",
                default="1",
            ),
            Key(
                name="nodes",
                kind=INTEGER,
                doc="Nodes, checked against tp x pp x dp / gpus_per_node.",
                default="tp x pp x dp / gpus_per_node",
            ),
            Key(
                name="first_stage_layers",
                kind=INTEGER,
                doc="Layers of the first pipeline stage (`num_layers_in_first_pipeline_stage`).",
                default="an even split",
            ),
            Key(
                name="last_stage_layers",
                kind=INTEGER,
                doc="Layers of the last pipeline stage (`num_layers_in_last_pipeline_stage`).",
                default="an even split",
            ),
        ),
    ),
    "ddp": (
        "Optional: the `DistributedDataParallelConfig` fields that shape the buffers.",
        (
            Key(
                name="grad_reduce_in_fp32",
                kind=BOOLEAN,
                doc="fp32 grad buffers.",
                default="true",
            ),
            Key(name="overlap_grad_reduce", kind=BOOLEAN, doc="Bucketed grads.", default="false"),
            Key(
                name="bucket_size",
                kind=INTEGER,
                doc="Elements per bucket (with overlap_grad_reduce).",
                default="megatron's",
            ),
            Key(
                name="pad_buckets_for_high_nccl_busbw",
                kind=BOOLEAN,
                doc="Pad each bucket for NCCL bus bandwidth.",
                default="false",
            ),
        ),
    ),
    "offload": (
        "What the trainer moves off the GPU between phases.",
        (
            Key(name="params", kind=BOOLEAN, doc="The DDP param buffers.", needed="yes"),
            Key(
                name="grads",
                kind=BOOLEAN,
                doc="The grad buffers are freed (nothing reaches the host).",
                needed="yes",
            ),
            Key(name="optimizer", kind=BOOLEAN, doc="The optimizer state.", needed="yes"),
            Key(
                name="precision_aware",
                kind=BOOLEAN,
                doc="megatron's precision-aware optimizer (master weights in its state).",
                default="false",
            ),
            Key(
                name="store_param_remainders",
                kind=BOOLEAN,
                doc="Precision-aware: int16 remainders of the fp32 master weights.",
                default="false",
            ),
            Key(
                name="main_params_dtype",
                kind=_one_of(STATE_DTYPES),
                doc="Master weights' dtype (precision-aware only).",
                default='"float32"',
            ),
            Key(
                name="exp_avg_dtype",
                kind=_one_of(STATE_DTYPES),
                doc="First moment's dtype (precision-aware only).",
                default='"float32"',
            ),
            Key(
                name="exp_avg_sq_dtype",
                kind=_one_of(STATE_DTYPES),
                doc="Second moment's dtype (precision-aware only).",
                default='"float32"',
            ),
        ),
    ),
    "limit": (
        "The memory the offloaded state must fit in; a size has a unit (a bare 512 is "
        "refused: it would be 512 bytes). At least one of the two limits.",
        (
            Key(
                name="host_memory_per_node",
                kind=SIZE,
                doc="The node's (cgroup's) host memory.",
                needed="or gpu_memory_per_device",
            ),
            Key(
                name="gpu_memory_per_device",
                kind=SIZE,
                doc="One GPU's memory.",
                needed="or host_memory_per_node",
            ),
            Key(
                name="host_reserved_per_node",
                kind=SIZE,
                doc="Host memory other things hold meanwhile (rollout engine, Ray...); "
                "below host_memory_per_node.",
                default='"0B"',
            ),
            Key(
                name="gpu_reserved_per_device",
                kind=SIZE,
                doc="GPU memory the next phase claims while the trainer is offloaded (vLLM); "
                "below gpu_memory_per_device.",
                default='"0B"',
            ),
        ),
    ),
    "expect": (
        'What the report says each strategy does: `naive = "oom"` (a registered name, '
        '`params.NAME`, `optimizer.NAME`, or your own `"package.module:object"`), '
        "`[expect.params]` / `[expect.optimizer]` tables of them, or `[[expect]]` tables "
        "with the keys below.",
        (
            Key(
                name="strategy",
                kind=STRING,
                doc="A strategy name or your own spec ([[expect]] only).",
                needed="in [[expect]]",
            ),
            Key(
                name="outcome",
                kind=_one_of(("oom", "ok")),
                doc="What the report says happens ([[expect]] only).",
                needed="in [[expect]]",
            ),
            Key(
                name="part",
                kind=_one_of(("params", "optimizer")),
                doc="Which registry the name is from, where both have it ([[expect]] only).",
                default="the registry that has the name",
            ),
            Key(name="note", kind=STRING, doc="Why, in words ([[expect]] only)."),
        ),
    ),
    "source": (
        "Where the scenario comes from. Needed in a scenario shipped with offloadprobe; "
        "optional in your own (a file outside the package's scenarios folder).",
        (
            Key(
                name="title",
                kind=STRING,
                doc="The report's title.",
                needed="with [source]",
            ),
            Key(name="url", kind=STRING, doc="A link to the report."),
            Key(name="notes", kind=STRING, doc="What is taken from where, what is assumed."),
        ),
    ),
    "repro": (
        "Optional: the scaled-down run `offloadprobe repro` makes; every option of "
        "`offloadprobe run` that a scenario may set, by its Python name, besides these.",
        (
            Key(
                name="payload",
                kind=SIZE,
                doc="The probe model's parameter bytes; the limit scales by the same factor.",
                needed="with [repro]",
            ),
            Key(
                name="cycles",
                kind=INTEGER,
                doc="Offload/load cycles (not with sequence: a sequence runs its own steps).",
                default="3",
            ),
            Key(
                name="ranks_per_node",
                kind=INTEGER,
                doc="Scaled ranks in one node cgroup, under the scaled node limit.",
                default="1",
            ),
        ),
    ),
}
REQUIRED_TABLES = ("model", "parallelism", "offload", "limit", "expect")
"""Tables every scenario has (``[source]`` too in a packaged one)."""
EXAMPLES = {
    "model": "num_layers, hidden_size, num_attention_heads, vocab_size, kv_channels, or "
    "params = 235_000_000_000",
    "parallelism": "tp = 4, pp = 8, dp = 2, gpus_per_node = 8",
    "offload": "params = true, grads = true, optimizer = true",
    "limit": 'host_memory_per_node = "1700GiB"',
    "expect": 'naive = "oom"',
    "source": 'title = "verl PR 6193"',
}
"""What to write in a missing table."""


REPRO_DEFAULTS = {"train_steps": "0 (optimizer children: 1)"}
"""Where ``repro`` runs its children otherwise than ``run``'s defaults (``repro/reproduce.py``)."""


def names(table: str) -> tuple[str, ...]:
    """The keys ``table`` may hold (``[repro]``: its own; the run options come apart)."""
    return tuple(k.name for k in TABLES[table][1])


def repro_options() -> tuple[Key, ...]:
    """``[repro]``'s run options, from the option model's scenario keys."""
    from offloadprobe.core.options import SCENARIO, for_verb

    kinds = {int: INTEGER, bool: BOOLEAN, float: "number", str: STRING}
    own = set(names("repro"))
    return tuple(
        Key(
            name=o.name,
            kind=SIZE if o.unit == "size" else kinds.get(o.type, STRING),
            doc=o.help,
            default=REPRO_DEFAULTS.get(
                o.name, "" if o.default in (None, ()) else str(o.default).lower()
            ),
        )
        for o in for_verb(SCENARIO)
        if o.name not in own
    )


def _row(key: Key) -> str:
    doc = key.doc.replace("|", "\\|")
    return f"| `{key.name}` | {key.kind} | {key.needed} | {key.default} | {doc} |"


def markdown() -> str:
    """``docs/scenario-keys.md``: every table and key, from these definitions."""
    from offloadprobe.scenarios.schema import ALIASES

    out = [
        "# Scenario keys",
        "",
        "<!-- generated from offloadprobe/scenarios/keys.py by tools/scenario_keys.py; "
        "do not edit -->",
        "",
        "Every table and key a scenario file may hold ([scenarios.md](scenarios.md) says "
        "what `plan` and `repro` do with them). A key not listed here is refused, with the "
        "nearest valid one. Needed: `yes`, the condition under which it is, or empty "
        "(optional; where it is absent, the default applies). Tables needed in every scenario: "
        + ", ".join(f"`[{t}]`" for t in REQUIRED_TABLES)
        + ".",
    ]
    for table, (about, keys) in TABLES.items():
        out += ["", f"## `[{table}]`", "", about, ""]
        out += ["| key | type | needed | default | meaning |", "| --- | --- | --- | --- | --- |"]
        rows = [*keys, *repro_options()] if table == "repro" else keys
        out += [_row(k) for k in rows]
    out += [
        "",
        "## Names from other configs",
        "",
        "A key under its Hugging Face or megatron name is refused with the name to use:",
        "",
        "| written | use |",
        "| --- | --- |",
    ]
    out += [f"| `{theirs}` | `{ours}` |" for theirs, ours in ALIASES.items()]
    return "\n".join(out) + "\n"
