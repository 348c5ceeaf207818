"""Scaled-down reproduction of a scenario: scaling, memory cgroups, host and GPU children."""
