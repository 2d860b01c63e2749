"""``python -m training.matrix_worker ROWS.json``: the option matrix's rows, one after another in
this process (or in each rank of one torchrun job), each through the trainer's own ``main``.

Owns what keeps the rows apart while they share a process: each row's stderr (fd 2, so torch's
C++ warnings too) goes to its folder's ``rank<r>.log``, its exit code and seconds to
``exit_rank<r>.json``; torch.compile's caches are reset between rows, and a process group a row
left up (a refusal after it started, a crash) is ended. Under torchrun every row joins the agent's
store under a prefix of its own: the trainer's ``restart_store`` gives one to each torchrun
attempt, and each row counts as one (``TORCHELASTIC_RESTART_COUNT``), since a second
``init_process_group`` on the same keys fails to connect. A row that raises is recorded with its
traceback and the next row runs. ``training.matrix`` plans the rows and reads what this writes.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path


def _one(row: dict, rank: int, attempt: int) -> None:
    from training import train

    folder = Path(row["folder"])
    folder.mkdir(parents=True, exist_ok=True)
    if "LOCAL_RANK" in os.environ:
        os.environ["TORCHELASTIC_RESTART_COUNT"] = str(attempt)
    sys.stderr.flush()
    saved = os.dup(2)
    t0 = time.monotonic()
    with open(folder / f"rank{rank}.log", "w") as log:
        os.dup2(log.fileno(), 2)
        try:
            code = train.main(row["argv"])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
    _reset(train)
    record = {"code": code, "seconds": round(time.monotonic() - t0, 2)}
    (folder / f"exit_rank{rank}.json").write_text(json.dumps(record))


def _reset(train) -> None:
    """What a row leaves in the process that the next must not meet."""
    import torch
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    torch._dynamo.reset()
    train._Stop.in_loop = train._Stop.requested = False
    train._Stop.recorder = None


def main(spec: str) -> int:
    rows = json.loads(Path(spec).read_text())
    rank = int(os.environ.get("RANK", "0"))
    for i, row in enumerate(rows):
        _one(row, rank, attempt=i + 1)
    return 0


if __name__ == "__main__":
    from training.distributed import exit_process

    sys.stdout.flush()
    exit_process(main(sys.argv[1]))
