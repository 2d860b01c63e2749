"""What the pages show, computed without a browser.

``progress``/``live`` (a run's progress, the runs at a glance, device rows,
a run's charts), ``compare`` and ``report`` (the modes side by side, the
HTML export), ``browse`` (any folder of event files), and their helpers:
``charts`` (plotly figures), ``downsample``, ``smoothing`` and ``text``
(formatting). Pages import from here and draw; nothing here imports
streamlit.
"""
