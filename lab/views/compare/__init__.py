"""Runs side by side. ``runs`` (what is compared) -> ``figures`` (each run's, with ``derived``,
``utilisation``, ``anatomy``) -> ``speed``, ``scaling``, ``noise``, ``repeats``, ``fairness`` ->
``comparison`` (one ``Comparison`` value) -> renderings: ``table`` (and CSV), ``document`` (JSON,
text), ``curves`` (charts), ``report`` (HTML)."""
