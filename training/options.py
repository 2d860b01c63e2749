"""The trainer's performance options as words and limits, declared once for the trainer and the lab.

``python -m training.train`` builds its flags and refusals from these (``training.cli``), and the
lab's Launch form, flags and checks read the same ones (``lab.engine.launch.knobs``), so a limit
cannot drift between the form and the trainer that runs it. Plain values and the trainer's one
check of them that needs no device (``accumulation_problem``), no torch: the lab's supervisor
imports nothing heavy through it.
"""

from __future__ import annotations

from typing import Any

PRECISIONS = ("fp32", "fp16", "bf16")
# DistributedDataParallel's own constructor options: refused in the other modes
DDP_ONLY = (
    "bucket_cap_mb",
    "grad_as_bucket_view",
    "static_graph",
    "find_unused_parameters",
    "sync_bn",
)
# FSDP's own options (``--mode fsdp``): refused in the other modes
FSDP_ONLY = ("reshard_after_forward", "fsdp_cpu_offload")
ON_OFF = ("on", "off")  # --reshard-after-forward: on = ZeRO-3 (the default), off = ZeRO-2-like
# --compile on|off (torch.compile, every mode): why DataParallel on two GPUs or more refuses it
COMPILE_WITH_DP = "its replicas of a compiled module do not run their own parameters"
MAX_ACCUM = 1024  # --accum-steps: 1 (none) to this many micro-batches per optimizer step
MAX_BUCKET_MB = 10_000  # --bucket-cap-mb: above 0 (the lab's 0: DDP's default 25) up to this
# DDP(static_graph=True) with no_sync() fails at the first backward (expect_autograd_hooks_
# INTERNAL ASSERT, reducer.cpp; pytorch/pytorch#143580, huggingface/accelerate#3679)
STATIC_GRAPH_WITH_ACCUM = "no_sync() fails its first backward"  # why both refuse the pair


def accumulation_problem(args: Any) -> str | None:
    """``--accum-steps`` outside its range, or beside ``--static-graph``: the trainer's refusal
    (``training.cli.check_knobs``; the lab's form says it in its words, ``lab.engine.launch.knobs``,
    from the same limits)."""
    if not 1 <= args.accum_steps <= MAX_ACCUM:
        return f"--accum-steps must be 1 (none) to {MAX_ACCUM}, got {args.accum_steps}"
    if args.static_graph and args.accum_steps > 1:
        return (
            f"--static-graph does not work with --accum-steps {args.accum_steps} "
            f"(DDP's {STATIC_GRAPH_WITH_ACCUM}): leave out --static-graph or use --accum-steps 1"
        )
    return None
