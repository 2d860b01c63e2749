"""The machine's devices: the one NVML gateway (``nvml``), what a snapshot says in words
(``notes``), the links between GPUs (``links``, ``sm_activity``) and what else uses the machine
(``interference``)."""
