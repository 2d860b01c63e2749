"""A running run's health: the rules that make findings, the watch that applies them, the memory
series they judge, every rank's stacks, torchrun's restarts."""
