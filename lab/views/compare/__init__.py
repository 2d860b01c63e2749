"""Runs side by side. ``runs`` (what is compared) -> ``figures`` (each run's, with ``derived``,
``utilisation``, ``anatomy``) -> ``speed``, ``scaling``, ``noise``, ``repeats``, ``fairness`` ->
``comparison`` (one ``Comparison`` value) -> renderings: ``table`` (and CSV), ``document`` (JSON,
text), ``curves`` (charts; ``bars``: throughput and speedup by mode in the colours of ``modes``),
``report`` (HTML). ``picker``: the page's run filter (regex, sweep)."""
