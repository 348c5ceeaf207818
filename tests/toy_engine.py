"""A second engine's descriptor for the tests: registered as ``toy`` where a test asks,
through the same registry as megatron's (``core.engines``). Its state is tests/fake_engine's
plain ``torch.nn`` model with ``torch.optim.AdamW``."""

from __future__ import annotations

from offloadprobe.core.engines import EngineInfo
from offloadprobe.core.roles import Role

ENGINE = EngineInfo(
    name="toy",
    summary="a plain torch.nn model with torch.optim.AdamW (tests only)",
    factory="tests.fake_engine:build_state",
    owners={"weight": Role.PARAMETERS, "exp_avg": Role.OPTIMIZER},
)
