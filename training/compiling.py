"""``--compile on``: ``torch.compile`` of the model in each mode, and the steps that pay for it.

Owns where the trainer compiles, what it refuses, and how the compile time is kept apart from
the steady state. Where (``compile_model``, after the wrap): single (and dp run as single)
compiles the model; ddp the ``DistributedDataParallel`` module, PyTorch's advice ("apply the DDP
wrapper before compiling"), so that DDPOptimizer splits the graph at the bucket boundaries and the
all-reduces still overlap the backward; fsdp each sharded unit's ``forward`` and the root's, in
place (torchtitan's per-block compile): FSDP2's hooks are never traced (``torch._dynamo.disable``),
so compiling the root alone would leave every unit built of ``torch.nn`` containers eager
(``tinycnn``: one graph of a flatten), and ``dynamic=False`` because the blocks of a stage share
their code at other shapes, where symbolic shapes failed in inductor (resnet18 on the CPU). The
blocks of one class share one code object, and each block is its own compiled entry of it (its
guards hold its own float attributes: ConvNeXt's, EfficientNet's and Swin's stochastic-depth
rates differ from block to block): past dynamo's ``recompile_limit`` (8) the rest would run
eagerly, so under fsdp the limit is raised to cover every sharded module twice (an epoch's
smaller last batch compiles again), ``recompile_limit_for``, and said in the log.
Validation runs eagerly (``eager``): eval mode, no gradients and its last, smaller batch would
compile again, and it is not timed. ``nn.DataParallel`` (dp on two GPUs or more) is refused
(``check``): it replicates the module at every forward and a compiled module's replicas do not run
their own parameters (``torch.compile(inner)``'s replicas fail, ``inner.compile()``'s run the
original's forward on the original's parameters: the bound forward is copied into each replica).
On the CPU inductor needs a C++ compiler (gcc here), checked before anything starts.

Nothing compiles until the first forward, so the first step(s) pay. ``Watch`` finds them: a step
during which dynamo compiled a graph (its count of unique graphs rose) is a compile step, from the
first step of this run up to the first that compiled nothing. Their seconds, from the start of the
run to the end of the last of them (validation and checkpoints left out), are ``compile_s`` in
summary.json, ``perf/compile_s`` once (at that step) and one line in rank 0's log (``compiled in X
s``); the loop's steady span (``steady_throughput_samples_per_sec``) starts after them, as
``steady_excluded_steps`` counts them. A graph can also compile later (a recompile: a new shape, a
guard that failed): ``Watch`` hands rank 0's recorder the count of graphs, and every logging window
during which it rose is left out of summary.json's ``throughput`` (``compile_windows``), however
small ``--log-every`` is.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from typing import Any, ContextManager

from torch import nn

from training.cli import BadInput
from training.metrics import Span
from training.options import COMPILE_WITH_DP

log = logging.getLogger(__name__)
TAG = "perf/compile_s"
# compile_model's words on dynamo's recompile limit under fsdp: the model is compiled before the
# trainer's logging is set up, so ``Watch`` (the loop's start) says them
_notes: list[str] = []


def enabled(args: Any) -> bool:
    """Whether ``--compile on`` was given."""
    return getattr(args, "compile", "off") == "on"


def check(args: Any, placement: Any) -> None:
    """Refuse ``--compile on`` where it cannot run: DataParallel, a CPU without a C++ compiler."""
    if not enabled(args):
        return
    if placement.effective_mode == "dp":
        raise BadInput(
            f"--compile on does not work with DataParallel ({COMPILE_WITH_DP}): use --mode ddp "
            "(one process per GPU under torchrun, compiled) or --compile off"
        )
    problem = _cxx_problem() if placement.device.type == "cpu" else None
    if problem:
        raise BadInput(
            f"--compile on needs a C++ compiler on the CPU (inductor builds its kernels with it): "
            f"{problem}: install g++ or use --compile off"
        )


def _cxx_problem() -> str | None:
    """Why inductor finds no C++ compiler here (its own search: ``CXX``, else g++), or None."""
    from torch._inductor import cpp_builder

    try:
        cpp_builder.get_cpp_compiler()
    except Exception as e:  # inductor's InvalidCxxCompiler, whatever it is called next
        text = str(e).strip()
        return text.splitlines()[0] if text else type(e).__name__
    return None


def compile_model(model: nn.Module, args: Any, mode: str) -> nn.Module:
    """The module the loop calls, compiled under ``--compile on`` (``model`` itself otherwise);
    ``model`` is the wrapped one (DDP, FSDP's root, or the plain model) in ``mode`` (effective)."""
    if not enabled(args):
        return model
    import torch

    if mode != "fsdp":
        return torch.compile(model)
    from torch.distributed.fsdp import FSDPModule

    # FSDP2's hooks are never traced (torch._dynamo.disable): each sharded unit's forward is
    # compiled on its own, the root's too, and the hooks run eagerly between them
    sharded = [m for m in model.modules() if isinstance(m, FSDPModule)]
    limit = raise_recompile_limit(len(sharded))
    _notes.append(
        f"--compile on under fsdp: {len(sharded)} sharded modules compiled one by one; dynamo's "
        f"recompile limit {limit} (the blocks of one class share their code)"
    )
    for m in sharded:
        m.forward = torch.compile(m.forward, dynamic=False)
    return model


def recompile_limit_for(modules: int) -> int:
    """Dynamo's ``recompile_limit`` for ``modules`` compiled one by one (FSDP's units and root):
    each may be an entry of a code object shared with the other blocks of its class, and an
    epoch's smaller last batch adds one more each."""
    return 2 * modules


def raise_recompile_limit(modules: int) -> int:
    """``torch._dynamo.config.recompile_limit`` (``cache_size_limit`` is its old alias) raised to
    ``recompile_limit_for(modules)`` where it is lower, and the accumulated limit with it; the
    limit now in force."""
    from torch._dynamo import config

    need = recompile_limit_for(modules)
    config.recompile_limit = max(config.recompile_limit, need)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, need)
    return int(config.recompile_limit)


def eager(args: Any) -> ContextManager:
    """Validation's forward runs eagerly under ``--compile on``: eval mode, no gradients and a
    smaller last batch would otherwise compile again (FSDP's root is compiled in place)."""
    if not enabled(args):
        return nullcontext()
    import torch

    return torch.compiler.set_stance("force_eager")


def _graphs() -> int:
    """How many graphs dynamo has compiled in this process so far."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


class Watch:
    """A run's leading steps that compile, from its first step (``first_step`` + 1, which starts
    now): their seconds, kept apart from the steady state; reported through ``recorder`` (rank
    0's ``training.metrics.Recorder``)."""

    def __init__(
        self, args: Any, recorder: Any, is_main: bool, paused_s: float, first_step: int
    ) -> None:
        self.active = enabled(args)  # False once a step compiled nothing, or the run ended
        self.rec, self.is_main, self.first_step = recorder, is_main, first_step
        self.seconds: float | None = None
        self.steps = 0
        self._graphs = _graphs() if self.active else 0
        self._span = Span(paused_s)
        if self.active:  # every logging window that compiles stays out of the throughput
            recorder.watch_graphs(_graphs)
        while _notes:
            note = _notes.pop(0)
            if is_main:
                log.info("%s", note)

    def step_done(self, paused_s: float, out: Any) -> None:
        """After a step, the device synchronised: if it compiled, its time joins ``seconds`` and
        ``out.steady_excluded_steps`` (``training.loop.Outcome``) covers it; the first step that
        compiled nothing ends the watch."""
        graphs = _graphs()
        if graphs == self._graphs and self.steps:
            self.finish()
            return
        self._graphs, self.steps = graphs, self.steps + 1
        self.seconds = self._span.seconds(paused_s)
        out.steady_excluded_steps = max(out.steady_excluded_steps, self.steps)

    def finish(self) -> None:
        """End the watch (a step compiled nothing, or the run ends): ``perf/compile_s`` at the
        last compile step, and the log line."""
        if not self.active:
            return
        self.active = False
        if self.seconds is None:
            return
        self.rec.scalars({TAG: self.seconds}, self.first_step + self.steps)
        if self.is_main:
            log.info(
                "compiled in %.1f s (the first %d step(s), %d graph(s)); the steady throughput "
                "leaves them out",
                self.seconds,
                self.steps,
                self._graphs,
            )
