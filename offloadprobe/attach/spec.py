"""What ``attach`` wraps: ``--phase NAME=MODULE:QUALNAME`` specs and ``--preset`` groups.

A spec names a phase and the function that is one call of it: ``MODULE`` is a dotted
module path, ``QUALNAME`` a function of that module or ``Class.method`` (a nested class
too: ``Outer.Inner.method``). Presets are data (``data/presets.toml``, shipped with the
package): named lists of specs. Everything wrong is a ``UsageError`` whose one line says
how to fix it, raised before the job starts.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib import resources

from offloadprobe.core.errors import UsageError

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
_DOTTED = re.compile(rf"{_IDENT}(\.{_IDENT})*")
EXAMPLE = "--phase offload=verl.utils.megatron_utils:offload_megatron_model_to_cpu"


@dataclass(frozen=True, kw_only=True, slots=True)
class PhaseSpec:
    """One named phase: every call of ``module:qualname`` is one call of it."""

    name: str
    module: str
    qualname: str
    preset: str | None = None
    """The preset that named it; None for a ``--phase`` of the user's."""

    @property
    def target(self) -> str:
        return f"{self.module}:{self.qualname}"

    def to_json(self) -> dict[str, str | None]:
        return {
            "name": self.name,
            "module": self.module,
            "qualname": self.qualname,
            "preset": self.preset,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Preset:
    """A packaged group of specs."""

    name: str
    summary: str
    phases: tuple[PhaseSpec, ...]


def parse_target(text: str, *, what: str) -> tuple[str, str]:
    """``MODULE:QUALNAME`` into its two parts; ``what`` names the input in the error."""
    module, colon, qualname = text.partition(":")
    if not colon or not module or not qualname:
        raise UsageError(f"{what}: {text!r} has no MODULE:QUALNAME target; write it as {EXAMPLE}")
    if not _DOTTED.fullmatch(module):
        raise UsageError(
            f"{what}: module {module!r} is not a dotted Python module path "
            "(letters, digits, _ and dots); e.g. verl.utils.megatron_utils"
        )
    if not _DOTTED.fullmatch(qualname):
        raise UsageError(
            f"{what}: {qualname!r} is not a function name or Class.method "
            "(Python identifiers joined by dots); e.g. _ParamAndGradBuffer.offload_to_cpu"
        )
    return module, qualname


def parse_phase(text: str) -> PhaseSpec:
    """``NAME=MODULE:QUALNAME`` as given to ``--phase``."""
    name, equals, target = text.partition("=")
    name = name.strip()
    what = f"--phase {text!r}"
    if not equals:
        raise UsageError(f"{what} has no NAME=: write it as {EXAMPLE}")
    if not _NAME.fullmatch(name):
        raise UsageError(
            f"{what}: phase name {name!r} must be letters, digits, '_', '.' or '-' "
            f"(not starting with '.' or '-'); write it as {EXAMPLE}"
        )
    module, qualname = parse_target(target.strip(), what=what)
    return PhaseSpec(name=name, module=module, qualname=qualname)


def _preset_from(name: str, table: object) -> Preset:
    where = f"preset {name!r} in data/presets.toml"
    if not isinstance(table, dict) or not isinstance(table.get("phase"), list):
        raise UsageError(f"{where} has no list of phases (a packaging error: reinstall)")
    phases = []
    for entry in table["phase"]:
        if not isinstance(entry, dict) or not {"name", "target"} <= entry.keys():
            raise UsageError(f"{where}: every phase needs a name and a target")
        module, qualname = parse_target(str(entry["target"]), what=where)
        phases.append(
            PhaseSpec(name=str(entry["name"]), module=module, qualname=qualname, preset=name)
        )
    return Preset(name=name, summary=str(table.get("summary", "")), phases=tuple(phases))


def presets() -> dict[str, Preset]:
    """Every packaged preset by name, in file order."""
    text = (resources.files("offloadprobe.attach") / "data" / "presets.toml").read_text()
    return {name: _preset_from(name, table) for name, table in tomllib.loads(text).items()}


def preset(name: str) -> Preset:
    """The packaged preset ``name``; the error lists the ones there are."""
    known = presets()
    if name not in known:
        raise UsageError(f"--preset {name!r} is not a preset: choose one of {', '.join(known)}")
    return known[name]


def resolve(phases: list[str], preset_names: list[str]) -> tuple[PhaseSpec, ...]:
    """The specs of ``--phase`` texts and ``--preset`` names, presets first, in the order
    given. A phase name may appear once; the same target under two names is refused too
    (one wrapper per function). None at all is a job that marks its phases itself
    (``offloadprobe.phase``): a job that then records none is judged as measuring nothing."""
    specs: list[PhaseSpec] = []
    for name in preset_names:
        specs.extend(preset(name).phases)
    specs.extend(parse_phase(text) for text in phases)
    names: dict[str, PhaseSpec] = {}
    targets: dict[str, PhaseSpec] = {}
    for spec in specs:
        if spec.name in names:
            raise UsageError(f"phase name {spec.name!r} is given twice: name each phase once")
        if spec.target in targets:
            other = targets[spec.target].name
            raise UsageError(
                f"{spec.target} is named twice ({other!r} and {spec.name!r}): "
                "give each function one phase name"
            )
        names[spec.name] = targets[spec.target] = spec
    return tuple(specs)
