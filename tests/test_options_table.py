"""``training.options.OPTIONS`` is the one declaration of the trainer's flags: its parser holds
every entry and nothing else (dest, default, choices, type, metavar, help), and its range checks
are the entries' own, with the refusals the trainer has always printed. In-process: the parser
and its checks import no torch."""

from __future__ import annotations

import argparse

import pytest

from training.cli import BadInput, build_parser, parse_args
from training.options import BY_NAME, KNOBS, OPTIONS

TYPES = {"int": int, "float": float}


def _actions() -> dict[str, argparse.Action]:
    return {a.dest: a for a in build_parser()._actions if a.dest != "help"}


def test_the_trainers_parser_is_the_table():
    actions = _actions()
    assert list(actions) == [o.name for o in OPTIONS]  # every flag, in --help's order
    assert set(KNOBS) <= set(OPTIONS) and len(BY_NAME) == len(OPTIONS)  # one entry per name
    for o in OPTIONS:
        a = actions[o.name]
        assert a.option_strings == [o.flag], o.name
        assert (a.help, a.metavar, a.required) == (o.help, o.metavar, o.required), o.name
        if o.kind == "check":
            assert isinstance(a, argparse._StoreTrueAction) and a.default is False, o.name
            continue
        assert a.default == o.default, o.name
        assert tuple(a.choices or ()) == o.choices, o.name
        assert a.type is TYPES.get(o.kind), o.name


# the trainer's refusals as it has always worded them (tests and users read these lines): a value
# refused, the line it gets, and the nearest value taken
REFUSALS = {
    "--batch-size": ("0", "--batch-size must be positive, got 0", "1"),
    "--lr": ("0", "--lr must be positive, got 0.0", "1e-09"),
    "--max-steps": ("-1", "--max-steps must be 0 (no limit) or positive, got -1", "0"),
    "--log-every": ("0", "--log-every must be 1 or more, got 0", "1"),
    "--val-every": ("-1", "--val-every must be 0 (each epoch end) or positive, got -1", "0"),
    "--workers": ("-1", "--workers must be 0 or more, got -1", "0"),
    "--image-size": ("3", "--image-size must be at least 4, got 3", "4"),
    "--grad-norm-warn": ("-0.5", "--grad-norm-warn must be 0 (off) or positive, got -0.5", "0"),
    "--dist-timeout": (
        "0",
        "--dist-timeout must be a positive number of seconds, got 0.0: e.g. 600",
        "0.5",
    ),
    "--data-delay-ms": ("60001", "--data-delay-ms must be 0 (off) to 60000, got 60001.0", "60000"),
    "--memory-snapshot": (
        "-1",
        "--memory-snapshot must be 0 (off) or a number of steps, got -1",
        "0",
    ),
    "--accum-steps": ("0", "--accum-steps must be 1 (none) to 1024, got 0", "1"),
    "--bucket-cap-mb": ("0", "--bucket-cap-mb must be above 0 and at most 10000, got 0.0", "0.5"),
}
CHECKED = [o for o in OPTIONS if o.check is not None]


def _refusal(argv: list[str]) -> str | None:
    try:
        parse_args(["--log-dir", "run", *argv])
    except BadInput as e:
        return str(e)
    return None


@pytest.fixture
def torchrun_env(monkeypatch):
    """A rank's environment, so that --mode ddp parses as under torchrun."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")


def test_every_range_is_an_entrys_and_refused_in_its_words(torchrun_env):
    assert {o.flag for o in CHECKED} == set(REFUSALS)
    for o in CHECKED:
        mode = ["--mode", o.only_in] if o.only_in else []
        value, line, taken = REFUSALS[o.flag]
        assert _refusal([*mode, o.flag, value]) == line
        assert _refusal([*mode, o.flag, taken]) is None, o.flag
        r = o.check
        # each bound is where the entry says: the last value in is taken, the first one out is not
        for bound, is_open, step in ((r.lo, r.lo_open, 1), (r.hi, r.hi_open, -1)):
            if bound is None or bound == float("inf"):
                continue
            inside = bound + step if is_open else bound
            outside = bound if is_open else bound - step
            fmt = (lambda v: str(int(v))) if o.kind == "int" else str
            assert _refusal([*mode, o.flag, fmt(inside)]) is None, (o.flag, inside)
            assert _refusal([*mode, o.flag, fmt(outside)]) == o.problem(TYPES[o.kind](outside))
            assert o.problem(TYPES[o.kind](outside)).startswith(f"{o.flag} must be ")


def test_a_modes_own_option_out_of_range_elsewhere_is_refused_as_out_of_place():
    assert "is an option of DistributedDataParallel" in _refusal(["--bucket-cap-mb", "-1"])


def test_each_trainer_option_the_lab_gives_is_a_form_field_with_the_tables_flag_and_range():
    """The Launch form (and ``lab launch``, built from it) declares no trainer flag, kind or range
    of its own: each field that hands the trainer a flag takes them from the option's entry."""
    from pathlib import Path

    from lab.engine.launch import commands, form
    from lab.engine.spec.run import RunConfig

    given = {f.trainer_flag: f for f in form.FIELDS if f.trainer_flag}
    for flag, f in given.items():
        o = BY_NAME[f.name]
        assert (o.flag, f.limits, f.unit) == (flag, o.limits, o.unit), f.name
        if o.choices:
            assert f.options == o.choices, f.name
    # every flag of a trainer command the lab builds, with every option set away from its default
    c = RunConfig(
        mode="ddp",
        nproc=2,
        gpus=(0, 1),
        amp=True,
        profile_steps="2:4",
        stop_on_nan=True,
        data_delay_ms=5,
        resume="/x/last.pt",
        precision="bf16",
        accum_steps=2,
        channels_last=True,
        bucket_cap_mb=4,
        grad_as_bucket_view=True,
        static_graph=True,
        find_unused_parameters=True,
        sync_bn=True,
        memory_snapshot=3,
        compile="on",
    )
    argv = commands.trainer_args(c, Path("run"))
    flags = [a for a in argv[2:] if a.startswith("--")]
    lab_own = {"--log-dir", "--device"}  # the run folder and whether it has GPUs
    assert set(flags) - lab_own <= set(given)
    assert all(f in {o.flag for o in OPTIONS} for f in flags)
    assert len(flags) == len(set(flags))  # none given twice (always and when set)
    # all of the trainer's but FSDP's own (this run is ddp) and the collective timeout (the lab
    # leaves it at PyTorch's)
    unused = {"--reshard-after-forward", "--fsdp-cpu-offload", "--dist-timeout"}
    assert set(flags) == {o.flag for o in OPTIONS} - unused


def test_lab_launch_has_each_trainer_flag_the_form_gives_with_the_tables_choices():
    from lab.cli.run_options import add_run_options
    from lab.engine.launch import form

    lab = argparse.ArgumentParser()
    add_run_options(lab)
    flags = {s: a for a in lab._actions for s in a.option_strings}
    for f in form.FIELDS:
        if not f.trainer_flag:
            continue
        a, o = flags[f.trainer_flag], BY_NAME[f.name]
        assert a.dest == o.name, f.name
        if a.choices is not None:  # restricted on the command line: to the trainer's choices
            assert tuple(a.choices) == o.choices, f.name
    assert tuple(flags["--mode"].choices) == BY_NAME["mode"].choices
