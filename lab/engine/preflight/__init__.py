"""Before a launch: what the run will do on this machine, in plain words, and what is refused
(memory estimate)."""
