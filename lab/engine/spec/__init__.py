"""The run's vocabulary, the base of the engine: every engine package may import it and it imports
none of them. ``run`` (the ``RunConfig`` value, modes, backends, the Slurm job's fields,
``ConfigError``, the processes, world size and threads a config implies), ``nccl`` (the NCCL
presets a run may name), ``diagnosis`` (the ``Diagnosis`` status.json holds) and ``sweep`` (the
scalings and a sweep's record in the runs folder)."""
