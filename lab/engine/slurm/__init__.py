"""Talking to a Slurm cluster: Slurm's commands (the one gateway, ``cmd``), its answers in the
lab's states and diagnoses (``states``, ``diagnoses``), the job's options (``options``) and one
node's device sampler (``node_sampler``). The job script is the launch's (``launch.slurm_job``),
the job's watch the supervisor's (``supervise.slurm_watch``)."""
