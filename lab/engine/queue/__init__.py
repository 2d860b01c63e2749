"""The queue of this machine's lab runs: one per runs folder (``<runs>/.queue/``). A run (or a
whole sweep) waits until the devices it needs are free of other lab runs; ``lock`` is the
crash-proof lock, ``book`` the queue's state and its rule, ``ticket`` a supervisor's place in it."""
