"""A run's supervisor: the one program that watches a run (``supervisor``), its one loop
(``watch``) over the run's source, a local child, an adopted orphan (``adopt``) or a Slurm job
(``slurm_watch``); status.json, device samples, diagnoses, linked events."""
