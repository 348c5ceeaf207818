"""Runs over several ranks: node cgroup, phase fences, gathering the records on rank 0."""
