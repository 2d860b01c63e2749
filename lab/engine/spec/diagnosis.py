"""Why a run ended as it did, in one value: the ``Diagnosis`` status.json's ``diagnosis`` holds.

A key (``lab.engine.supervise.failures`` lists the known ones), the cause in one sentence, the fix,
and where known the failed rank, its exit code and the lines around the failure. The local
supervisor (``lab.engine.supervise.diagnose``), the Slurm watcher (``lab.engine.slurm.diagnoses``)
and the launcher all make them; ``supervisor_failure`` is the supervisor's own.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Diagnosis:
    key: str
    cause: str
    fix: str
    rank: int | None = None
    exit_code: int | None = None
    excerpt: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON object status.json's ``diagnosis`` holds."""
        return asdict(self)


def supervisor_failure(cause: str, fix: str, exit_code: int | None = None) -> Diagnosis:
    """The diagnosis of a run the supervisor itself could not start or see through (key
    ``supervisor``)."""
    return Diagnosis("supervisor", cause, fix, exit_code=exit_code)
