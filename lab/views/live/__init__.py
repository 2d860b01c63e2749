"""One run as it goes: which runs, progress, charts, health, a Slurm run's nodes, a script run's
extras."""
