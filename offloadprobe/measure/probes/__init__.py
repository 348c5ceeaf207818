"""Probes: each reads one memory counter around a phase. A new probe goes here.

A probe has ``begin()`` (reset its peak counter, note the starting value) and
``end()`` (return a typed reading, or None where the counter does not exist).
"""
