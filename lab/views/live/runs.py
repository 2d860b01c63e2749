"""Which runs the Live page and the home page show, and what they say about one run besides its
charts.

Owns the order of runs (newest first), the run the Live page opens on (the
newest running one), the home page's runs at a glance (live ones, then the
latest finished), the one-line label of a run, the failure box of a failed
or lost run (cause and fix), what Stop does to it, the note when a run ran in another mode than
asked, and the lines of what it was asked to do. A run's progress is
``lab.views.live.progress``, its charts ``lab.views.live.run_charts``, the device strip
``lab.views.device_strip``. A record is anything with
``lab.engine.registry.RunRecord``'s attributes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lab.engine.spec import backends
from lab.runfolder import FAILED, LIVE_STATES, LOST, QUEUED, RUNNING, STARTING, parse_time
from lab.runrecords import summary_file

# What the Live page lists of a run's config, in this order.
CONFIG_KEYS = (
    "mode",
    "gpus",
    "nproc",
    "nnodes",
    "model",
    "dataset",
    "batch_size",
    "epochs",
    "max_steps",
    "lr",
    "amp",
    "seed",
    "workers",
    "image_size",
)


def is_active(state: str | None) -> bool:
    """Has (or will have) processes: the Live page refreshes it and offers Stop."""
    return state in LIVE_STATES


def stop_help(record: Any) -> str:
    """What the Stop button does to this run (its backend's way: signals here, scancel there)."""
    return backends.named(record.backend).stop_help


def _created_key(record: Any) -> float:
    dt = parse_time(getattr(record, "created_at", None))
    return dt.timestamp() if dt else 0.0


def newest_first(records: Sequence[Any]) -> list[Any]:
    """Records sorted newest first by created_at, then run id."""
    return sorted(records, key=lambda r: (_created_key(r), getattr(r, "run_id", "")), reverse=True)


def default_run(records: Sequence[Any]) -> str | None:
    """The run the Live page opens on: the newest running one, else the newest."""
    ordered = newest_first(records)
    if not ordered:
        return None
    for state_group in ((RUNNING,), (STARTING, QUEUED)):
        for r in ordered:
            if r.state in state_group:
                return r.run_id
    return ordered[0].run_id


def glance(records: Sequence[Any], finished: int = 5) -> tuple[list[Any], list[Any]]:
    """``(active, latest finished)`` for the home page, each newest first."""
    ordered = newest_first(records)
    return [r for r in ordered if is_active(r.state)], [
        r for r in ordered if not is_active(r.state)
    ][:finished]


def run_label(record: Any, state: bool = True) -> str:
    """One line naming a run: id, name when it adds something, mode, and state.

    A picker leaves the state out: it changes under a live page while the
    picker's label would not.
    """
    name = getattr(record, "name", "") or ""
    extra = f" “{name}”" if name and name not in record.run_id else ""
    bad = list(getattr(record, "unreadable", None) or [])  # damaged run files, named
    return (
        f"{record.run_id}{extra} · {record.mode or '?'}"
        + (f" · {record.state}" if state else "")
        + (f" ({', '.join(bad)} unreadable)" if bad and state else "")
    )


def failure_box(record: Any) -> dict[str, Any] | None:
    """The diagnosis of a failed/lost run as the page shows it, or None.

    Always has ``cause`` and ``fix``; ``rank`` and ``excerpt`` when known.
    """
    if record.state not in (FAILED, LOST):
        return None
    d = dict(getattr(record, "diagnosis", None) or {})
    if record.state == LOST and not d:
        d = {
            "cause": "The run's supervisor is gone (the machine restarted or it was killed), so "
            "its state is unknown.",
            "fix": "Look at the log below; launch it again, with --resume auto to continue from "
            "its last checkpoint.",
        }
    if not d.get("cause"):
        code = getattr(record, "exit_code", None)
        d["cause"] = (
            f"The training command exited with code {code}."
            if code is not None
            else "The run failed."
        )
    d.setdefault("fix", "Read the last lines of the log below for the error.")
    return d


def fallback_note(record: Any) -> str | None:
    """One line when a run ran in another mode than asked (e.g. DP on one device), else None.

    The silent fall back to one device is a trap the seeds warn about; the
    trainer records it in summary.json (``effective_mode``, ``effective_mode_reason``).
    """
    summ = summary_file(getattr(record, "summary", None) or None)
    asked = summ.mode or getattr(record, "mode", None)
    ran = summ.effective_mode
    if not ran or not asked or ran == asked:
        return None
    why = summ.effective_mode_reason
    return f"Asked for {asked}, ran as {ran}" + (f": {why}." if why else ".")


def config_lines(record: Any) -> list[str]:
    """What the run was asked to do, as short ``name: value`` lines (non-default extras
    included)."""
    cfg = dict(getattr(record, "config", None) or {})
    out = [f"{k}: {cfg[k]}" for k in CONFIG_KEYS if k in cfg]
    if cfg.get("extra_env"):
        out.append(
            "extra_env: " + ", ".join(f"{k}={v}" for k, v in sorted(cfg["extra_env"].items()))
        )
    return out
