"""What the pages show, computed without a browser.

One run: ``progress`` (step, ETA, throughput), ``run_charts`` (its training
curves and device timelines), ``runscalars`` (a run folder's ``tb/`` and
``sys/`` as one run), ``live`` (which runs, the failure box, the notes),
``script_run`` (what a user's script run shows besides), ``nodes`` (a Slurm
run's job and each node's device charts), ``health`` (the findings' banner
and badge, stacks, restarts, resume links) and ``device_strip`` (the home
page's devices). Runs side by side: the ``compare``
package (one ``Comparison`` value, rendered as the table, JSON, text, charts
and HTML; its docstring draws the flow). Any folder of
event files: ``logfolder`` (its runs), ``run_select`` (filter, experiments,
selection), ``hparams_table``, ``browse`` (tags, x axes, smoothing) and
``scalar_chart`` (the Logs charts). Helpers: ``charts`` (plotly figures),
``interval_bars`` (bars with their intervals and repeats),
``downsample``, ``smoothing`` and ``text`` (formatting). Pages import from
here and draw; nothing here imports
streamlit.
"""
