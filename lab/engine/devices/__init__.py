"""The machine's devices: the one NVML gateway (``nvml``) and what a snapshot says in words
(``notes``)."""
