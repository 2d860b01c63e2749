"""From what a person asks for to a started run: options, config, the command (a Slurm run's job
script, ``slurm_job``), the run folder, the launch of one run or a sweep of them."""
