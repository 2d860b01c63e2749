"""A run's supervisor: a local run's child process group (``supervisor``, ``adopt`` for an orphan)
or a Slurm job (``slurm_watch``); status.json, device samples, diagnoses, linked events."""
