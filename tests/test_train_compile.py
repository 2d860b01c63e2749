"""``--compile on|off``: torch.compile as a knob, its compile time kept apart from the steady state.

Two real single runs of ``tinycnn`` on the CPU, the same seed and global batch, one compiled
(inductor, gcc: about 22 s cold on 2 cores, 1-2 s once inductor's cache in /tmp holds it) and
one not: their per-step losses agree to 1e-5 relative over 10 steps (measured: 1e-7); the
compiled run reports the compiling step(s) apart (summary.json ``compile_s`` and
``compile_steps``, ``perf/compile_s`` once, one ``compiled in`` line) and its steady throughput
leaves them out, which the summary's own figures show: the steady span plus the compile time fit
inside the whole run's training time (they would not if the compiling step were counted as
steady). In this process: the parser's refusal of a bad value, DataParallel's and a missing C++
compiler's refusals, and ``Watch`` over steps that compile one after another (a real run compiles
in its first step only)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.helpers.train_ddp import SAME, losses
from tests.helpers.train_run import trainer
from training import compiling
from training.cli import BadInput, parse_args

TOLERANCE = 1e-5  # relative, per step: inductor's fused kernels round differently


def run(path: Path, *opts: str) -> tuple[Path, str]:
    done = trainer("--log-dir", str(path), *SAME, *opts, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return path, done.stderr


@pytest.fixture(scope="module")
def eager(single_same) -> Path:
    """The eager run: the session's single run of the same options (``--compile`` off)."""
    return single_same


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> tuple[Path, str]:
    return run(tmp_path_factory.mktemp("compiled") / "run", "--compile", "on")


def summary(path: Path) -> dict:
    return json.loads((path / "summary.json").read_text())


def scalars(path: Path, tag: str) -> list[tuple[int, float]]:
    acc = EventAccumulator(str(path / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []


@pytest.mark.proc
@pytest.mark.slow  # a cold inductor cache: about 50 s with the eager run
def test_a_compiled_run_has_the_eager_runs_losses(eager, compiled):
    ours, theirs = losses(compiled[0]), losses(eager)
    assert sorted(ours) == sorted(theirs) == list(range(1, 11))
    for step in theirs:
        assert abs(ours[step] - theirs[step]) <= TOLERANCE * abs(theirs[step]), step
    assert theirs[1] != theirs[10]  # the losses move, so agreeing is not trivial
    assert summary(compiled[0])["config"]["compile"] == "on"


@pytest.mark.proc
@pytest.mark.slow  # a cold inductor cache: about 50 s with the eager run
def test_the_compile_time_is_reported_apart_and_left_out_of_the_steady_throughput(compiled):
    path, stderr = compiled
    s = summary(path)
    n, g = s["compile_steps"], s["global_batch"]
    assert s["compile_s"] > 0 and n >= 1
    assert s["steady_excluded_steps"] >= n
    assert scalars(path, compiling.TAG) == [(n, pytest.approx(s["compile_s"], rel=1e-6))]
    lines = [line for line in stderr.splitlines() if "compiled in" in line]
    assert len(lines) == 1 and f"the first {n} step(s)" in lines[0], stderr[-2000:]
    # the whole run's training time, and the steady span's, from the summary's own throughputs
    whole_s = s["steps"] * g / s["throughput_samples_per_sec"]
    steady_s = (
        (s["steps"] - s["steady_excluded_steps"]) * g / s["steady_throughput_samples_per_sec"]
    )
    assert steady_s + s["compile_s"] <= whole_s + 1e-3, (steady_s, s["compile_s"], whole_s)


@pytest.mark.proc
def test_an_eager_run_reports_no_compile_time(eager):
    s = summary(eager)
    assert s["compile_s"] is None and s["compile_steps"] is None
    assert s["config"]["compile"] == "off" and scalars(eager, compiling.TAG) == []


def test_the_flag_takes_on_or_off_and_refuses_anything_else():
    assert parse_args(["--log-dir", "x"]).compile == "off"
    assert parse_args(["--log-dir", "x", "--compile", "on"]).compile == "on"
    with pytest.raises(BadInput, match=r"argument --compile: invalid choice: 'yes'"):
        parse_args(["--log-dir", "x", "--compile", "yes"])


def placement(mode: str, device: str) -> SimpleNamespace:
    return SimpleNamespace(effective_mode=mode, device=torch.device(device))


def test_dataparallel_on_gpus_is_refused_and_dp_run_as_single_is_not(monkeypatch):
    monkeypatch.setattr(compiling, "_cxx_problem", lambda: None)  # the compiled run asks gcc
    args = parse_args(["--log-dir", "x", "--compile", "on", "--mode", "dp"])
    with pytest.raises(BadInput, match="does not work with DataParallel.*use --mode ddp"):
        compiling.check(args, placement("dp", "cuda"))
    compiling.check(args, placement("single", "cpu"))  # fewer than two GPUs: a single run


def test_a_cpu_without_a_cxx_compiler_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(compiling, "_cxx_problem", lambda: "No working C++ compiler found")
    args = parse_args(["--log-dir", "x", "--compile", "on"])
    with pytest.raises(BadInput, match="needs a C\\+\\+ compiler.*install g\\+\\+") as e:
        compiling.check(args, placement("single", "cpu"))
    assert "\n" not in str(e.value) and "No working C++ compiler found" in str(e.value)
    compiling.check(parse_args(["--log-dir", "x"]), placement("single", "cpu"))  # off: no check
    compiling.check(args, placement("single", "cuda"))  # on a GPU inductor writes Triton


class Written:
    def __init__(self) -> None:
        self.values: list[tuple[dict, int]] = []

    def scalars(self, values: dict, step: int) -> None:
        self.values.append((values, step))

    def watch_graphs(self, count) -> None:  # the windows' watch: tests/test_compile_windows.py
        pass


def test_watch_keeps_every_leading_step_that_compiles(monkeypatch, caplog):
    """Steps 21 and 22 of a run resumed at step 20 compile, step 23 does not: both are kept
    apart, the tag is written once at step 22, later compiles are not the watch's."""
    graphs = iter([0, 2, 3, 3, 9])
    monkeypatch.setattr(compiling, "_graphs", lambda: next(graphs))
    rec, out = Written(), SimpleNamespace(steady_excluded_steps=1)
    watch = compiling.Watch(SimpleNamespace(compile="on"), rec, True, 0.0, 20)
    with caplog.at_level(logging.INFO, logger="training.compiling"):
        for _ in range(3):
            assert watch.active
            watch.step_done(0.0, out)
    assert not watch.active and watch.steps == 2 and out.steady_excluded_steps == 2
    assert rec.values == [({compiling.TAG: watch.seconds}, 22)] and watch.seconds > 0
    watch.finish()  # the loop's end: nothing more
    assert len(rec.values) == 1 and len(caplog.records) == 1
    assert "the first 2 step(s), 3 graph(s)" in caplog.records[0].getMessage()


def test_watch_is_idle_without_compile_and_ends_with_a_run_still_compiling(monkeypatch):
    monkeypatch.setattr(compiling, "_graphs", lambda: pytest.fail("counted without --compile"))
    off = compiling.Watch(SimpleNamespace(compile="off"), Written(), True, 0.0, 0)
    off.finish()
    assert not off.active and off.seconds is None and off.steps == 0
    monkeypatch.setattr(compiling, "_graphs", iter([0, 1]).__next__)
    rec, out = Written(), SimpleNamespace(steady_excluded_steps=0)
    one = compiling.Watch(SimpleNamespace(compile="on"), rec, False, 0.0, 0)
    one.step_done(0.0, out)  # a one-step run: its only step compiled
    one.finish()
    assert out.steady_excluded_steps == 1 and rec.values == [({compiling.TAG: one.seconds}, 1)]
