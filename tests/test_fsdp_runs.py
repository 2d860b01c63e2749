"""FSDP launched by the lab (issue 34): a real ``lab sweep --modes ddp,fsdp`` of resnet18 on 2 gloo
ranks, whose fsdp rank holds less than a ddp rank, as its estimate says, computes DDP's losses,
and Compare's trade in one sentence. The trainer's own losses, resume and refusals:
tests/test_train_fsdp.py."""

from __future__ import annotations

import json

import pytest

from lab.engine.launch import launcher
from lab.views.compare import memory
from tests.helpers.cli import run_lab
from tests.helpers.compare_runs import load_runs
from tests.helpers.train_ddp import losses

# On the CPU the measured peak is the resident set's: glibc keeps freed heap, and FSDP frees and
# allocates each block's gathered buffers every step, so its heap fragments and the peak hid the
# saving (a rise of 326 MiB against DDP's 227 measured here). The trainer has glibc give blocks of
# 64 KiB or more back when freed (summary.json's memory.cpu_allocator), so an ordinary run's peak
# follows what is live (146 against 205 then): what the estimate counts. No environment set here.


@pytest.mark.proc
@pytest.mark.timeout(400)  # two resnet18 runs of 2 ranks one after another on a shared machine
def test_fsdp_on_two_ranks_holds_less_per_rank_than_ddp_as_its_estimate_says(tmp_path):
    res = run_lab(
        tmp_path,
        "sweep",
        "--modes",
        "ddp,fsdp",
        "--devices",
        "2",
        "--model",
        "resnet18",
        "--image-size",
        "32",
        "--max-steps",
        "6",
        "--log-every",
        "1",
        "--checkpoint",
        "none",
        "--json",
    )
    assert res.returncode == 0, res.stderr
    ids = json.loads(res.stdout)["run_ids"]
    for rid in ids:
        assert launcher.wait(rid, tmp_path, 300) == "succeeded", (
            tmp_path / rid / "stdout.log"
        ).read_text()[-2000:]
    ddp, fsdp = (json.loads((tmp_path / rid / "summary.json").read_text()) for rid in ids)
    assert (ddp["mode"], fsdp["mode"], fsdp["effective_mode"]) == ("ddp", "fsdp", "fsdp")
    est = {s["mode"]: s["memory"]["estimate_mib"]["cpu0"] for s in (ddp, fsdp)}
    for part in ("parameters", "gradients", "optimizer"):  # each split over the 2 ranks
        assert est["fsdp"][part] == pytest.approx(est["ddp"][part] / 2, abs=0.01)
    assert est["fsdp"]["gathered"] > 0 and "buckets" not in est["fsdp"]
    # the same training: resnet18's BatchNorm normalises over each rank's 32 images in both (on
    # the CPU no --sync-bn), so fsdp's losses are DDP's, step for step
    curves = [losses(tmp_path / rid) for rid in ids]
    assert sorted(curves[1]) == sorted(curves[0]) == list(range(1, 7))
    for step, value in curves[0].items():
        assert curves[1][step] == pytest.approx(value, rel=1e-4), (step, curves)

    def rise(s: dict) -> float:  # the most loaded rank's
        m = s["memory"]
        return max(m["peak_mib"][d] - m["baseline_mib"][d] for d in m["peak_mib"])

    assert rise(fsdp) < rise(ddp), (rise(fsdp), rise(ddp))
    assert (
        ddp["memory"]["cpu_allocator"]
        == fsdp["memory"]["cpu_allocator"]
        == {"mmap_threshold": 65536}
    )
    # the estimate explains it: each measured rise within the factor the CPU's figures keep to
    for s in (ddp, fsdp):
        assert 0.8 <= rise(s) / est[s["mode"]]["total"] <= 2.0, (s["mode"], rise(s), est)
    points = memory.frontier(load_runs(tmp_path))
    assert [(p.mode, p.devices, p.measured) for p in points] == [
        ("ddp", 2, True),
        ("fsdp", 2, True),
    ]
    (sentence,) = memory.trade(points)
    share = rise(fsdp) / rise(ddp)
    assert sentence.startswith(f"fsdp on 2 uses {share:.0%} of DDP's memory per device at ")
