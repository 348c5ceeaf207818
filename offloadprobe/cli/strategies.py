"""Strategy names on the command line: help texts that list every one, and row labels."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from offloadprobe.core.errors import StrategyError, UsageError
from offloadprobe.core.registry import is_user_spec


def model_help() -> str:
    from offloadprobe.engine.strategies import MODEL_STRATEGIES

    return (
        f"Parameter offload strategy: {MODEL_STRATEGIES.choices()}. Prefix a name to label "
        "the row: mine=mypkg.offload:offload,load."
    )


def optimizer_help() -> str:
    from offloadprobe.engine.optimizer.strategies import OPTIMIZER_STRATEGIES

    return f"Optimizer-state offload strategy: {OPTIMIZER_STRATEGIES.choices()}."


def split_label(spec: str) -> tuple[str | None, str]:
    """``name=spec`` names a row ``name``; a plain spec has no label of its own."""
    head, sep, tail = spec.partition("=")
    if not sep or "(" in head or ":" in head:  # keyword arguments of a function pair
        return None, spec
    name = head.strip()
    if not name or not tail.strip():
        raise UsageError(f"--strategy {spec!r}: give name=strategy, e.g. fixed=mymod:offload,load")
    if is_user_spec(name):
        raise UsageError(f"--strategy {spec!r}: a row's name has no colon")
    return name, tail.strip()


def check_strategies(
    models: Iterable[str],
    optimizers: Iterable[str],
    *,
    model_place: str = "--strategy {}",
    load: bool = True,
    engine: str | None = None,
) -> None:
    """Every name registered, or a user's ``package.module:...`` that can be called as
    offloadprobe calls it, before anything starts: exit 2 with every valid name. A name of
    the other kind, or nearer to one (``--strategy legasy``), says where it goes
    (``model_place`` for a model strategy: compare takes them as arguments). ``load``: a
    user's module is imported here (``run`` and ``compare`` do anyway); else its source is
    read without running it (``check_user_code``)."""
    models, optimizers = list(models), list(optimizers)
    from offloadprobe.engine.optimizer.strategies import OPTIMIZER_STRATEGIES
    from offloadprobe.engine.strategies import MODEL_STRATEGIES

    kinds = (
        (MODEL_STRATEGIES, OPTIMIZER_STRATEGIES, "--optimizer-strategy {}", models),
        (OPTIMIZER_STRATEGIES, MODEL_STRATEGIES, model_place, optimizers),
    )
    for registry, other, place, names in kinds:
        for name in names:
            try:
                registry.check(name)
            except StrategyError as exc:
                raise _other_kind(exc, name, registry, other, place) from None
    if engine is not None:
        check_served(engine, models, optimizers)
    check_user_code(models, optimizers, load=load)


def served_names(registry: Any, engine: str) -> list[str]:
    """The registered names whose descriptors serve ``engine`` (imports descriptors)."""
    return [n for n in registry.names() if registry.get(n).serves(engine)]


def check_served(engine: str, models: Iterable[str], optimizers: Iterable[str]) -> None:
    """Each registered strategy serves ``engine`` (its descriptor's ``engines``), else exit
    2 naming the ones that do; a user's own code serves any engine."""
    from offloadprobe.core.engines import ENGINES
    from offloadprobe.engine.optimizer.strategies import OPTIMIZER_STRATEGIES
    from offloadprobe.engine.strategies import MODEL_STRATEGIES

    ENGINES.check(engine)
    for registry, names in ((MODEL_STRATEGIES, models), (OPTIMIZER_STRATEGIES, optimizers)):
        for name in names:
            if is_user_spec(name) or registry.get(name).serves(engine):
                continue
            mine = ", ".join(served_names(registry, engine)) or "none"
            raise UsageError(
                f"{registry.kind} {name!r} does not serve engine {engine!r}: "
                f"choose one of those that do ({mine}), or your own package.module:object"
            )


def check_user_code(models: Iterable[str], optimizers: Iterable[str], *, load: bool) -> None:
    """Each user's ``package.module:...`` spec: its form, its module, and whether what it
    names takes the one argument offloadprobe passes (``engine.strategies.user_calls``).
    ``load``: imported and read with ``inspect.signature``; else read from its source."""
    from offloadprobe.engine.strategies.user_calls import check_unloaded

    for flag, specs in (("--strategy", models), ("--optimizer-strategy", optimizers)):
        for spec in specs:
            if not is_user_spec(spec):
                continue
            if not load:
                check_unloaded(spec, flag=flag)
            elif flag == "--strategy":
                from offloadprobe.engine.strategies import model_strategy

                model_strategy(spec)
            else:
                from offloadprobe.engine.optimizer.strategies import optimizer_strategy

                optimizer_strategy(spec)


def check_strategy_options(models: Iterable[str], options: Mapping[str, str]) -> None:
    """``--strategy-option`` pairs each registered model strategy that reads options
    (``check_options``) takes, before any worker starts: exit 2 with one line. A user's
    strategy reads them in its worker."""
    from offloadprobe.engine.strategies import MODEL_STRATEGIES

    if not options:
        return
    models = list(models)
    builtin = MODEL_STRATEGIES.builtin_names()
    readers = [n for n in builtin if MODEL_STRATEGIES.get(n).check_options]
    if not any(n in readers or n not in builtin for n in models):  # the user's may read them
        pairs = " ".join(f"{k}={v}" for k, v in options.items())
        read = "reads" if len(models) == 1 else "read"
        raise UsageError(
            f"--strategy-option {pairs}: {' and '.join(models)} {read} no options, so it "
            f"would be ignored: drop it, or use a strategy that reads options "
            f"({', '.join(readers)})"
        )
    for name in models:
        if name in MODEL_STRATEGIES:
            check = MODEL_STRATEGIES.get(name).check_options
            if check is not None:
                check(options)


def _other_kind(exc: StrategyError, name: str, registry, other, place: str) -> StrategyError:
    """``exc``, or a better one where ``name`` is (nearly) a name of the ``other`` kind."""
    own = registry.near(name)
    theirs = (name, 1.0) if name in other.names() else other.near(name)
    if theirs is None or (own is not None and own[1] >= theirs[1]):
        return exc
    found = theirs[0]
    what = f"{found!r} is" if found == name else f"did you mean {found!r}? it is"
    article = "an" if other.kind[0] in "aeiou" else "a"
    return StrategyError(
        f"unknown {registry.kind} {name!r} ({what} {article} {other.kind}: "
        f"{place.format(found)}): choose one of {registry.choices()}"
    )
