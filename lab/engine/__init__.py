"""Starting, watching and stopping runs, and the machine they run on.

``request`` (form or command-line values into a ``RunConfig``, and what is
shown before a launch) → ``config`` (what may be asked; the trainer's own
options checked by ``trainer_options``, the model by ``models``, the
"Compare modes" configs made by ``sweeps``) → ``preflight`` (what it will do
here, in plain words, and what it refuses) → ``commands`` (argv, with
``environment``'s variables and a free port from ``ports``) → ``launcher``
(the run folder, the detached supervisor) → ``supervisor`` (the child's
process group, status.json, device samples through ``sampler``, what else
used the machine through ``interference``, the ``diagnose`` table, a running
run's health through ``health_watch``: the ``health`` rules, every rank's
``stacks``, torchrun's ``restarts``) → ``registry`` (the runs on disk,
reconciled with live processes, never writing). ``resume`` starts a run
again from an earlier one's checkpoint. A user's own script: ``script`` (its
config, command and launch), ``script_form`` (the "My script" form and
preview) and ``linked`` (the folders of event files it creates, status.json's
``events_dirs``). A Slurm cluster (``backend`` slurm): ``slurm`` (the job
script, its checks and pre-flight), ``slurm_states`` (Slurm's answers in the
lab's states and diagnoses), ``slurm_watch`` (the Slurm run's supervisor:
submits, follows, cancels) and ``node_sampler`` (one node's device samples).
``access`` says who may launch from the pages; ``device_notes`` says in
sentences what a device snapshot shows. Gateways to outside systems:
``devices`` is the only module that calls NVML, ``procs`` the only one that
calls psutil, ``slurm_cmd`` the only one that runs Slurm's commands; only
``launcher`` and ``supervisor`` start other processes (and ``stacks``, py-spy
for the supervisor). ``logs`` reads a run's output. Nothing here draws. Each
module names its test file in its docstring.
"""
