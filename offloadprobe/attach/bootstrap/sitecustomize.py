"""offloadprobe attach's bootstrap: run by Python's ``site`` at start-up in every process
whose PYTHONPATH has this folder first (``offloadprobe attach`` puts it there, and child
processes inherit the variable).

It reads one environment variable, ``OFFLOADPROBE_JOB`` (the job file), and without it
does nothing. With it, it imports offloadprobe's stdlib-only ``attach`` runtime from the
installation this file belongs to (only that package, not the rest of its folder, is
made importable), which records the process and wraps the job's named functions as their
modules are imported. Then it runs the ``sitecustomize`` that would have run without this
one (the next on ``sys.path``), if there is one, under the same name. A failure of the
bootstrap itself is one line on stderr and never stops the process.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _offloadprobe_attach():
    if not os.environ.get("OFFLOADPROBE_JOB"):
        return
    package = os.path.dirname(os.path.dirname(_HERE))  # .../offloadprobe
    if "offloadprobe" not in sys.modules:
        import importlib.util

        spec = importlib.util.spec_from_file_location(
            "offloadprobe",
            os.path.join(package, "__init__.py"),
            submodule_search_locations=[package],
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules["offloadprobe"] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules["offloadprobe"]
            raise
    from offloadprobe.attach import runtime

    runtime.activate("sitecustomize")


def _chain():
    """Run the sitecustomize this one hides (the next on sys.path), as site would have."""
    import importlib.machinery
    import importlib.util

    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


try:
    _offloadprobe_attach()
except Exception as _error:
    sys.stderr.write(f"offloadprobe attach: bootstrap failed, process not measured: {_error!r}\n")
_chain()
