"""``--compile on`` and the steady throughput (issue 53): every logging window during which a graph
compiled is left out of summary.json's ``throughput`` (a small ``--log-every`` puts several windows
in the first steps' compiling; a late recompile lands in any window), and the lab's median of a
run's own events leaves out the same windows (summary.json's ``compile_windows``). Under fsdp the
blocks of one class share a code object, one compiled entry each: dynamo's recompile limit is
raised to cover them (convnext_tiny's 18 blocks against the default 8). In this process: the
recorder and ``Watch`` fed directly, dynamo's graph count stood in for."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from lab.views.compare.figures import run_spread
from lab.views.compare.spread import median_spread, steady_windows
from training import compiling, models, sharding
from training.metrics import RATE_TAG, Recorder
from training.throughput import window_spread

# steps 1-8 at --log-every 2: the first two windows compile (the first steps), the fourth holds a
# late recompile; their rates are a compile's, the others the steady state's
WINDOWS = {2: 3.0, 4: 5.0, 6: 100.0, 8: 4.0, 10: 101.0, 12: 102.0, 14: 99.0}
COMPILES_AT = {1, 2, 3, 7}  # the steps during which dynamo compiled a graph


def _train(monkeypatch, tmp_path) -> Recorder:
    graphs = [0]
    monkeypatch.setattr(compiling, "_graphs", lambda: graphs[0])
    rec = Recorder(tmp_path, enabled=True)
    watch = compiling.Watch(SimpleNamespace(compile="on"), rec, True, 0.0, 0)
    out = SimpleNamespace(steady_excluded_steps=0)
    for step in range(1, 15):
        graphs[0] += step in COMPILES_AT
        if watch.active:  # as the loop calls it
            watch.step_done(0.0, out)
        if step in WINDOWS:
            rec.scalars({RATE_TAG: WINDOWS[step]}, step)
    watch.finish()
    rec.close()
    assert out.steady_excluded_steps == 3  # the leading compile steps, as before
    return rec


def test_every_window_that_compiled_is_left_out_of_the_throughput(monkeypatch, tmp_path):
    rec = _train(monkeypatch, tmp_path)
    assert rec.compile_windows == [2, 4, 8]  # the late recompile's window too
    got = window_spread(rec.rate_windows, rec.compile_windows)
    assert got["windows"] == 4 and got["median"] == pytest.approx(100.5)
    # before: only the first window dropped, the compiles' rates pulled the median down
    assert window_spread(rec.rate_windows)["median"] == pytest.approx(99.5)
    assert window_spread([(2, 3.0), (4, 5.0)], [2, 4]) is None  # nothing steady: no figure


def test_the_lab_leaves_out_the_same_windows_from_the_events(monkeypatch, tmp_path):
    rec = _train(monkeypatch, tmp_path)
    steps, rates = zip(*rec.rate_windows)
    ours = window_spread(rec.rate_windows, rec.compile_windows)
    lab = median_spread(steady_windows(steps, rates, rec.compile_windows))
    assert (lab.median, lab.ci_low, lab.ci_high, lab.windows) == (
        ours["median"],
        ours["ci_low"],
        ours["ci_high"],
        ours["windows"],
    )
    # a summary without its throughput (every window compiled, or a run still going): the events
    series = {RATE_TAG: SimpleNamespace(step=list(steps), value=list(rates))}
    run = SimpleNamespace(summary={"compile_windows": rec.compile_windows})
    assert run_spread(run, series).median == pytest.approx(100.5)
    assert run_spread(SimpleNamespace(summary={}), series).median == pytest.approx(99.5)


def test_a_run_without_compile_keeps_every_window_but_the_first(tmp_path):
    rec = Recorder(tmp_path, enabled=True)
    for step, rate in WINDOWS.items():
        rec.scalars({RATE_TAG: rate}, step)
    rec.close()
    assert rec.compile_windows == []
    assert window_spread(rec.rate_windows, rec.compile_windows)["windows"] == 6


def test_the_recompile_limit_covers_every_sharded_module_of_convnext():
    with torch.device("meta"):
        net = models.build("convnext_tiny", 3, 10)
    modules = len(sharding.units(net)) + 1  # its blocks, then the root
    blocks = sum(type(m).__name__ == "CNBlock" for m in net.modules())
    assert blocks == 18 > torch._dynamo.config.recompile_limit  # the default (8) runs 10 eagerly
    assert compiling.recompile_limit_for(modules) >= modules
    with torch._dynamo.config.patch(recompile_limit=8, accumulated_recompile_limit=256):
        limit = compiling.raise_recompile_limit(modules)
        assert torch._dynamo.config.recompile_limit == limit >= modules
        assert torch._dynamo.config.cache_size_limit == limit  # the old name, one setting
        assert compiling.raise_recompile_limit(2) == limit  # never lowered
    assert torch._dynamo.config.recompile_limit == 8


def test_the_limit_is_said_once_when_the_loop_starts(monkeypatch, tmp_path, caplog):
    """compile_model runs before the trainer's logging is set up: Watch says its note."""
    monkeypatch.setattr(compiling, "_graphs", lambda: 0)
    monkeypatch.setattr(compiling, "_notes", ["dynamo's recompile limit 38"])
    with caplog.at_level("INFO", logger="training.compiling"):
        compiling.Watch(SimpleNamespace(compile="on"), Recorder(tmp_path, False), True, 0.0, 0)
        compiling.Watch(SimpleNamespace(compile="on"), Recorder(tmp_path, False), True, 0.0, 0)
    assert [r.getMessage() for r in caplog.records] == ["dynamo's recompile limit 38"]
