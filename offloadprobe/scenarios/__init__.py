"""OOM-report scenarios: production setups described as TOML, loaded into typed records."""

from offloadprobe.scenarios.scenario import ScenarioErrors
from offloadprobe.scenarios.schema import Scenario, ScenarioError, load_scenario

__all__ = ["Scenario", "ScenarioError", "ScenarioErrors", "load_scenario"]
