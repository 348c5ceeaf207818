"""Third-party chatter that is not offloadprobe's output, silenced in every process."""

from __future__ import annotations

THIRD_PARTY = ("megatron", "transformer_engine", "apex", "torch.distributed")
"""Packages whose import-time and construction-time chatter is not offloadprobe's output:
megatron-core's deprecation banners (``GPTModel IS DEPRECATED``, logged by
``megatron.core`` loggers) and optional-backend warnings (Transformer Engine, Apex,
``warnings.warn`` in their modules). Our own notes say what was emulated or missing."""


def quiet_third_party() -> None:
    """Silence warnings raised in, and log records below ERROR from, ``THIRD_PARTY``."""
    import logging
    import warnings

    for package in THIRD_PARTY:
        warnings.filterwarnings("ignore", module=package.replace(".", r"\.") + r"(\.|$)")
        logging.getLogger(package).setLevel(logging.ERROR)
