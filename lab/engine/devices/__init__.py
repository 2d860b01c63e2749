"""The machine's devices: the one NVML gateway (``nvml``), what a snapshot says in words
(``notes``), the links between GPUs (``links``, ``sm_activity``), what else uses the machine
(``interference``) and the one device sampler that a run's and a Slurm node's extend
(``sampler``)."""
