"""``offloadprobe attach``: measure every named offload call of an unmodified job, in
every Python process of its tree.

The job side (imported in the job's processes; stdlib only): ``protocol`` (job file and
record names), ``runtime`` (this process's session), ``hook`` (wrap on import),
``wrap``, ``probe`` (one measured call), ``stream`` (the process's record file), ``api``
(``offloadprobe.phase``), ``bootstrap/sitecustomize.py`` and ``plugin`` (verl's entry
point). The parent side: ``spec`` and ``data/presets.toml``, ``run``, ``tree``,
``collect`` into ``records``, ``verdict``, and the reporters.
"""
