"""Starting, watching and stopping runs, and the machine they run on: one package (or module) per
unit, the units' import graph without a cycle (tests/test_boundaries.py checks it).

From the bottom: ``spec`` (the run's vocabulary: ``RunConfig``, modes, the backends' facts,
``ConfigError``, NCCL presets, ``Diagnosis``, scalings and the sweep record; it imports no other
unit), the gateways ``procs`` (the only psutil caller), ``spawn`` (the only module that starts
processes) and ``devices`` (the only NVML caller; links, what else uses the machine), ``ports`` (a
free rendezvous port), ``scalars`` (the event files the lab writes itself), ``slurm`` (Slurm's
commands, states, diagnoses, job options, one node's sampler), ``registry`` (the runs on disk,
reconciled with live processes, never writing) and ``logs`` (a run's output), ``queue`` (runs
waiting for the devices), ``health`` (rules, the watch, every rank's ``stacks``, torchrun's
restarts), ``supervise`` (a local run's supervisor and its sampler, diagnoses, linked event folders;
``adopt`` for an orphan; ``slurm_watch`` for a Slurm job), ``preflight`` (what a run will do here,
and what is refused), ``launch`` (form, request, config checks, the backends' actions, commands,
environment, a Slurm job script, the run folder, the launcher, sweeps of runs, a user's script,
resume), then ``sweep`` (the "Compare modes" plan and ``--vary``), ``noise`` (the noise floor,
measured with launched runs) and ``linkcheck`` (the GPUs' links measured with torchrun). Nothing
here draws.
"""
