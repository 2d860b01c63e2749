"""Starting, watching and stopping runs, and the machine they run on.

``request`` (form or command-line values into a ``RunConfig``, and what is
shown before a launch) → ``config`` (what may be asked) → ``preflight`` (what
it will do here, in plain words) → ``launcher`` (argv and env, the run folder,
the detached ``supervisor``) → ``supervisor`` (the child's process group,
status.json, device samples through ``sampler``, the ``diagnose`` table, a
running run's health through ``health_watch``: the ``health`` rules, every
rank's ``stacks``, torchrun's ``restarts``) →
``registry`` (the runs on disk, reconciled with live processes, never
writing). Gateways to outside systems: ``devices`` is the only module that
calls NVML, ``procs`` the only one that calls psutil; only ``launcher`` and
``supervisor`` start processes (and ``stacks``, py-spy for the supervisor).
``resume`` starts a run again from an earlier one's checkpoint. ``logs``
reads a run's output. Nothing here
draws. Each module names its test file in its docstring.
"""
