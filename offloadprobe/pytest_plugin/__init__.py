"""pytest plugin: offload-memory budgets for tests, as pytest-memray's ``limit_memory``.

Registered through the ``pytest11`` entry point; see ``plugin.py`` for the marker
and fixtures.
"""
