"""Runs side by side: figures, intervals, verdicts, warnings, and the table, JSON, charts and HTML
report."""
