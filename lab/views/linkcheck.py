"""Home's link check, shown: a saved ``lab.engine.linkcheck`` record as a heading and one table row
per message size (bytes, time, nccl-tests' algbw and busbw); a check with a model adds a table
each for its fsdp units' all-gathers and reduce-scatters (``tables``)."""

from __future__ import annotations

from typing import Any, Mapping

from lab.engine import linkcheck

# the form's "largest message" box: 0 keeps the engine's default
MAX_MIB_HELP = (
    "The largest all-reduced message, in MiB, up to 1024 (1 GiB); 0: the default (256 MiB on "
    "GPUs, 16 MiB on the CPU). Sizes start at 1 KiB."
)


def max_bytes(max_mib: float) -> int | None:
    """The engine's ``max_bytes`` for the box's MiB: None (its default) for 0 or less."""
    return int(max_mib * 1024**2) if max_mib > 0 else None


def heading(rec: Mapping[str, Any]) -> str:
    """One line: the backend, ranks, where and the check's id."""
    gpus = rec.get("gpus") or []
    where = ", ".join(f"GPU {g}" for g in gpus) or "the CPU"
    return (
        f"All-reduce, {rec.get('backend', '?')}, {rec.get('world_size', '?')} ranks on {where} "
        f"(saved as {rec.get('id', '?')})"
    )


def _gbps(value: Any) -> float:
    """A bandwidth to four significant figures: a slow link's 1 KiB row (0.0004 GB/s on a busy
    CPU) would read 0.000, as if nothing moved, at a fixed three decimals."""
    return float(f"{float(value):.4g}")


MODEL_HELP = (
    "Optional: a model (tinycnn or a torchvision name) whose fsdp units' all-gathers and "
    "reduce-scatters are timed too, at each unit's parameter bytes"
)
TITLES = {"all_gather": "All-gather", "reduce_scatter": "Reduce-scatter"}


def rows(rec: Mapping[str, Any], op: str = "all_reduce") -> list[dict[str, Any]]:
    """One row per message size of ``op`` (``lab.engine.linkcheck.OPS``), smallest first: bytes,
    time_ms (the mean over ranks), the slowest rank's where the check has it, algbw and busbw
    (GB/s)."""
    out = [
        {
            "bytes": int(r["bytes"]),
            "time_ms": round(float(r["time_ms"]), 3),
            **(
                {"slowest rank (ms)": round(float(r["max_time_ms"]), 3)}
                if r.get("max_time_ms") is not None
                else {}
            ),
            "algbw (GB/s)": _gbps(r["algbw_gbps"]),
            "busbw (GB/s)": _gbps(r["busbw_gbps"]),
        }
        for r in linkcheck.rows_of(dict(rec), op)
    ]
    return sorted(out, key=lambda row: row["bytes"])


def tables(rec: Mapping[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """``(heading, rows)`` per kind the model's sizes were timed for (``[]`` without a model):
    the sizes an fsdp run of it moves, one per distinct unit size."""
    units = rec.get("units") or []
    out = []
    for op, title in TITLES.items():
        got = rows(rec, op)
        if got:
            out.append(
                (
                    f"{title}, the fsdp units of {rec.get('model')} "
                    f"({len(units)} units, {len(got)} sizes)",
                    got,
                )
            )
    return out
