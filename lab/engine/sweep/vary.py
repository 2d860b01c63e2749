"""Sweeps over knobs: ``sweep --vary NAME=V1,V2[,…]`` crosses a run option's values with the
sweep's modes, device counts and repeats.

``parse`` reads each ``--vary`` as the option's flag would be read: NAME is a run option's flag
without its dashes (``bucket-cap-mb``), each value is converted to the type of ``RunConfig``'s
default (a switch takes ``on``/``off``, ``true``/``false`` or ``1``/``0``) and checked against the
option's choices; the ranges and the knobs' own checks are the launch's (``launch_sweep`` checks
every config before anything starts). ``crossed`` makes one config per base config and
combination of values, named with the values (``…-bucket-cap-mb25``; with several,
``…-bcm25-as4``); a knob of one mode (``knobs.ONLY_IN``: DDP's, FSDP's) is applied to that
mode's runs only: the sweep's other runs run once, at its default, and their ``varied`` leaves it
out. ``varied`` is what a run's run.json records.

A sweep of a user's script (``parse(..., script=True)``) varies the script's own flags instead:
NAME is a long flag of the script without its dashes (``lr`` for ``--lr``), each value is given
to it as text, ``--lr 0.1``, replacing the flag where the script's arguments already have it
(``--lr X`` or ``--lr=X``), else added at their end; every run is a script run's, so every axis
applies to every run.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from typing import Any

from lab.engine.launch.form import FIELDS
from lab.engine.launch.knobs import ONLY_IN
from lab.engine.spec.modes import LABELS
from lab.engine.spec.run import ConfigError, RunConfig
from lab.runfolder import SCRIPT

# what sets up a sweep's runs (its modes, devices, nodes, names) or is no single value to compare
_NOT_VARIED = {
    "mode", "gpus", "nproc", "nnodes", "node_rank", "rdzv_endpoint", "backend", "partition",
    "gpus_per_node", "cpus_per_task", "time", "account", "sbatch_args", "name", "tags",
    "extra_env", "resume", "dataset", "max_restarts", "stall_after", "stop_on_nan",
    "checkpoint", "log_every", "val_every", "profile_steps", "grad_norm_warn", "memory_snapshot",
}  # fmt: skip
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(RunConfig)}
# flag without dashes -> RunConfig field
VARIABLE = {
    f.cli_flag()[2:]: f.name
    for f in FIELDS
    if f.name in _DEFAULTS and f.name not in _NOT_VARIED and not f.flag
}
# a run name's 40 characters less interleaved's "-r20" (lab.engine.launch.config's names)
NAME_ROOM = 36
_TRUE, _FALSE = ("on", "true", "1", "yes"), ("off", "false", "0", "no")
_SCRIPT_FLAG = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")  # a long flag's name, e.g. lr, batch-size

Axes = list[tuple[str, tuple[Any, ...]]]  # (flag without dashes, its values), in the given order


def _value(flag: str, field: str, text: str) -> Any:
    default = _DEFAULTS[field]
    declared = next(f for f in FIELDS if f.name == field)
    text = text.strip()
    try:
        if isinstance(default, bool):
            if text.lower() not in _TRUE + _FALSE:
                raise ValueError
            value: Any = text.lower() in _TRUE
        else:
            value = type(default)(text)
    except ValueError:
        kind = "on or off" if isinstance(default, bool) else f"a {type(default).__name__}"
        raise ConfigError(
            "vary", f"{flag}={text!r}: each value of {flag} must be {kind}, e.g. --vary "
            f"{flag}={_example(field)}"
        ) from None  # fmt: skip
    if declared.options and value not in declared.options:
        shown = ", ".join(o for o in declared.options if o)
        raise ConfigError("vary", f"{flag}={text!r}: use values of {shown}")
    return value


def _example(field: str) -> str:
    default = _DEFAULTS[field]
    if isinstance(default, bool):
        return "off,on"
    declared = next(f for f in FIELDS if f.name == field)
    return declared.vary_example or f"{default},…"


def parse(texts: list[str], script: bool = False) -> Axes:
    """``--vary`` texts (``NAME=V1,V2``) as axes; an unknown name, a repeated one, fewer than two
    values or a bad value is a ``ConfigError`` naming the fix. ``script``: NAME is a flag of the
    user's script and its values are text."""
    axes: Axes = []
    for text in (t for t in texts if t.strip()):  # the Launch page's blank lines
        name, sep, values = text.partition("=")
        name = name.strip().lstrip("-")
        items = [v.strip() for v in values.split(",") if v.strip()] if sep else []
        if script:
            if not _SCRIPT_FLAG.match(name):
                raise ConfigError(
                    "vary", f"{name or text!r} is no flag name: use NAME=V1,V2 with NAME a long "
                    "flag of your script without its dashes, e.g. --vary lr=0.1,0.01 for --lr"
                )  # fmt: skip
            parsed: tuple[Any, ...] = tuple(dict.fromkeys(items))
            example = f"{name}=A,B"
        else:
            if name not in VARIABLE:
                raise ConfigError(
                    "vary", f"{name or text!r} is no option a sweep can vary: use NAME=V1,V2 with "
                    f"NAME one of {', '.join(sorted(VARIABLE))}"
                )  # fmt: skip
            parsed = tuple(dict.fromkeys(_value(name, VARIABLE[name], v) for v in items))
            example = f"{name}={_example(VARIABLE[name])}"
        if len(parsed) < 2:
            raise ConfigError("vary", f"{text!r}: give two values or more, e.g. --vary {example}")
        if name in dict(axes):
            raise ConfigError("vary", f"{name} is varied twice: give its values in one --vary")
        axes.append((name, parsed))
    return axes


def _is_script(config: Any) -> bool:
    return config.kind == SCRIPT


def with_flag(args: tuple[str, ...], flag: str, value: str) -> tuple[str, ...]:
    """A script's arguments with ``--flag value``: in place of each ``--flag X`` or
    ``--flag=X`` they have, else at their end."""
    opt, out, i, found = f"--{flag}", [], 0, False
    while i < len(args):
        if args[i] == opt and i + 1 < len(args):
            out += [opt, value]
            i, found = i + 2, True
            continue
        if args[i].startswith(opt + "="):
            out.append(f"{opt}={value}")
            i, found = i + 1, True
            continue
        out.append(args[i])
        i += 1
    return tuple(out) if found else (*args, opt, value)


def _flag_value(args: tuple[str, ...], flag: str) -> str | None:
    """The value the script's arguments give ``--flag`` (the last one), None without it."""
    opt, value = f"--{flag}", None
    for i, a in enumerate(args):
        if a == opt and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(opt + "="):
            value = a[len(opt) + 1 :]
    return value


def applies(flag: str, config: Any) -> bool:
    """Whether the option of ``flag`` means something for ``config``: DDP's options in ddp only,
    FSDP's in fsdp only; a script's own flags in every run of it."""
    return _is_script(config) or ONLY_IN.get(VARIABLE[flag], config.mode) == config.mode


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _name(stem: str, pairs: list[tuple[str, Any]]) -> str:
    """``<stem>-<flag><value>…`` in ``NAME_ROOM`` characters: where that is too long the flags
    go by their initials (``bcm1-as4``), then the stem is cut: the values stay."""
    suffix = "".join(f"-{flag}{_shown(v)}" for flag, v in pairs)
    if len(stem) + len(suffix) > NAME_ROOM:
        short = ("".join(w[0] for w in flag.split("-")) for flag, _ in pairs)
        suffix = "".join(f"-{s}{_shown(v)}" for s, (_, v) in zip(short, pairs))
    return (stem[: max(0, NAME_ROOM - len(suffix))] + suffix)[-NAME_ROOM:].lstrip("-._")


def crossed(configs: list[Any], axes: Axes) -> list[Any]:
    """Every config at every combination of the values that apply to it (in the axes' order, the
    last varying fastest), named ``<name>-<flag><value>…``; a config no axis applies to stays as
    it is. A mode's own option in a sweep without that mode is a ``ConfigError``."""
    for flag, _ in axes:
        if not any(applies(flag, c) for c in configs):
            mode = ONLY_IN[VARIABLE[flag]]
            raise ConfigError(
                "vary", f"{flag} is an option of {LABELS[mode]} and this sweep has no "
                f"{mode} run: add {mode} to --modes"
            )  # fmt: skip
    out = []
    for c in configs:
        mine = [(flag, values) for flag, values in axes if applies(flag, c)]
        for combo in itertools.product(*(values for _, values in mine)):
            pairs = list(zip((flag for flag, _ in mine), combo))
            name = _name(c.name or c.sweep_stem, pairs)
            if _is_script(c):
                args = c.args
                for flag, v in pairs:
                    args = with_flag(args, flag, v)
                out.append(dataclasses.replace(c, name=name, args=args))
            else:
                fields = {VARIABLE[flag]: v for flag, v in pairs}
                out.append(dataclasses.replace(c, name=name, **fields))
    return out


def varied(config: Any, axes: Axes) -> dict[str, Any] | None:
    """run.json's ``varied`` of a run of the sweep: ``{flag: its value}`` for each axis that
    applies to it; None for a sweep that varies nothing."""
    if not axes:
        return None
    if _is_script(config):
        return {flag: _flag_value(config.args, flag) for flag, _ in axes}
    return {flag: getattr(config, VARIABLE[flag]) for flag, _ in axes if applies(flag, config)}


def sweep_runs(
    configs: list[Any], axes: Axes, repeats: int
) -> tuple[list[Any], list[dict[str, Any] | None]]:
    """The sweep's runs in the order they run (each value crossed in, then the repeats taking
    turns) and each one's ``varied``: what ``sweeps.launch_sweep`` is given."""
    from lab.engine.sweep.plan import interleaved

    runs = interleaved(crossed(configs, axes) if axes else configs, repeats)
    return runs, [varied(c, axes) for c in runs]
