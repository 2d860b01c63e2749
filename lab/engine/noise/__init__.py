"""This machine's noise floor: one config run several times, taking turns, and the spread of their
throughputs kept as ``<runs>/noise/<id>.json`` (``record``; ``measure`` runs it)."""
