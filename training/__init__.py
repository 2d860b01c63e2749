"""What runs on the devices: ``python -m training.train`` and its parts.

``cli`` (options and one-line refusals; ``options``: the performance options' words and
limits, which the lab reads too), ``data`` (digits, synthetic, image
folders), ``models`` (tinycnn, resnet18), ``distributed`` (devices and the
process group), ``sharding`` (FSDP: the blocks sharded, the gathered checkpoint), ``loop`` (the
steps), ``metrics`` (run-folder outputs),
``checkpoint`` (last.pt), ``debug`` (stacks on SIGUSR1, ``--stop-on-nan``,
``--data-delay-ms``, a test seam), ``profiling`` and ``breakdown`` (``--profile-steps``:
traces and where the step time went). Never imports ``lab``: the two sides meet only in
the run folder (docs/contracts.md).
"""
