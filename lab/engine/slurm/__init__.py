"""Runs on a Slurm cluster: the job script, Slurm's commands (the one gateway), its states, the
job's watcher."""
