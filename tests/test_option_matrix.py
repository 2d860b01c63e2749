"""The option matrix (``training.matrix``): every pair of values a user can pick trains, or is
refused in one line before anything starts.

In this process: the plan covers every pair of values that can meet in a row that the trainer's
own checks accept, every refusal row is refused by them, an option enters the matrix by its
``matrix`` values in ``training.options.KNOBS`` alone, and docs/option-matrix.md is the plan's
own table. One process test runs the CPU tier for real (``scripts/option_matrix.py``'s rows:
single and dp in one process, ddp and fsdp in one torchrun job of two gloo ranks, each row through
the trainer's ``main``) and holds every row to its plan: among them the findings of issue 53 that
failed before (fsdp + resnet18 + bf16; fsdp on 2 ranks with a validation split 4 and 3 batches,
which hung; a single run's checkpoint resumed as fsdp, and fsdp's sharded one as single, dp and
ddp; channels-last under fsdp, refused in one line instead of a crash on rank 1). Its table is
printed (``-s`` shows it). Cost here (2 cores, other work beside it): 226 s of wall time and 232 s
of CPU for 42 rows (27 that train, 8 refusals, 7 donors), most of it the compile rows' inductor
and gcc (89-156 s each with a cold cache)."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import pytest

from scripts import option_matrix
from training import matrix
from training.matrix import Tier

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "option-matrix.md"


@pytest.fixture(scope="module")
def cpu_plan() -> matrix.Plan:
    """The CPU tier's plan, made in this process without asking gcc whether it is there (a
    process): the compiler is the machine's, not a pair of options; the process test, which
    compiles, meets the real one."""
    from training import compiling

    with pytest.MonkeyPatch.context() as m:
        m.setattr(compiling, "_cxx_problem", lambda: None)
        return matrix.plan(Tier("cpu"))


def test_every_pair_that_can_meet_trains_in_some_row_and_every_row_is_what_the_trainer_says(
    cpu_plan, monkeypatch
):
    from training import compiling

    monkeypatch.setattr(compiling, "_cxx_problem", lambda: None)

    def refused(row: dict) -> str | None:
        return matrix.refusal(row, cpu_plan.tier)

    covered = set().union(*(matrix._pairs(r, cpu_plan.axes) for r in cpu_plan.trains))
    base = matrix.defaults(cpu_plan.axes)
    for a, b in itertools.combinations(cpu_plan.axes, 2):
        for va, vb in itertools.product(a.values, b.values):
            pair = ((a.name, va), (b.name, vb))
            modes = [va] if a.name == "mode" else matrix.MODES
            meets = any(refused({**base, "mode": m, a.name: va, b.name: vb}) is None for m in modes)
            assert (pair in covered) == meets, pair
    for row in cpu_plan.trains:
        assert refused(row) is None, row
    for row, why in cpu_plan.refused:
        assert why and refused(row) == why and "\n" not in why
    assert 20 <= len(cpu_plan.trains) <= 30  # pairwise, not the 4 x 5 x 2^8 product


def test_the_findings_of_issue_53_are_rows_of_the_cpu_matrix(cpu_plan):
    """fsdp meets BatchNorm in bf16, an uneven validation, another mode's checkpoint and
    compile in rows that must train; channels-last under fsdp in a row that must be refused."""
    fsdp = [r for r in cpu_plan.trains if r["mode"] == "fsdp"]
    assert any(r["family"] == "BatchNorm" and r["precision"] == "bf16" for r in cpu_plan.trains)
    assert any(r["precision"] == "bf16" for r in fsdp)
    assert any(r["validation"] == "uneven" for r in fsdp)
    assert any(r["resume"] == "other mode" for r in fsdp)
    assert any(r["resume"] == "other mode" and r["mode"] != "fsdp" for r in cpu_plan.trains)
    assert any(r["compile"] == "on" for r in fsdp)
    refused = {(r["mode"], r["channels_last"]): why for r, why in cpu_plan.refused}
    assert "FSDP2 shards contiguous parameters only" in refused[("fsdp", True)]


def test_a_new_option_enters_the_matrix_by_its_entry_alone(monkeypatch):
    """A made-up option with two matrix values becomes an axis, its flag in each row's argv."""
    from training import options

    extra = replace(options.BY_NAME["channels_last"], name="grad_as_bucket_view", only_in="ddp")
    knobs = tuple(extra if o.name == "grad_as_bucket_view" else o for o in options.KNOBS)
    monkeypatch.setattr(matrix, "KNOBS", knobs)
    axes = {f.name: f for f in matrix.factors(Tier("cpu"))}
    assert axes["grad_as_bucket_view"].values == (False, True)
    row = {**matrix.defaults(tuple(axes.values())), "mode": "ddp", "grad_as_bucket_view": True}
    assert "--grad-as-bucket-view" in matrix.argv(row, Tier("cpu"), "x")


def test_the_gpu_tier_adds_the_gpu_only_values_and_the_torchvision_models():
    axes = {f.name: f.values for f in matrix.factors(Tier("gpu"))}
    cpu = {f.name: f.values for f in matrix.factors(Tier("cpu"))}
    assert "fp16" in axes["precision"] and "fp16" not in cpu["precision"]
    assert "sync_bn" in axes and "fsdp_cpu_offload" in axes
    assert "sync_bn" not in cpu and "fsdp_cpu_offload" not in cpu
    assert (
        Tier("gpu").model("LayerNorm") == "vit_b_16" and Tier("gpu").image_size("vit_b_16") == 224
    )


def test_the_gpu_tier_plans_every_pair_with_fp16_offload_and_sync_bn(monkeypatch):
    """What ``scripts/gpu_check.py --matrix`` plans on two GPUs of compute capability 9.0. No GPU
    here: torch's answers about the devices are faked (capability and name only: the plan asks
    nothing else of CUDA), and so is the C++ compiler's check (a process)."""
    import torch

    from training import compiling

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: "a Hopper GPU")
    monkeypatch.setattr(compiling, "_cxx_problem", lambda: None)
    gpu = matrix.plan(Tier("gpu"))
    trains = gpu.trains
    assert any(
        r["mode"] == "fsdp" and r["fsdp_cpu_offload"] and r["precision"] == "fp16" for r in trains
    )
    assert any(r["mode"] == "ddp" and r["sync_bn"] and r["family"] == "BatchNorm" for r in trains)
    assert any(r["mode"] == "fsdp" and r["family"] == "LayerNorm" for r in trains)
    why = [w for _r, w in gpu.refused]
    assert any("DataParallel" in w and "--compile on" in w for w in why)  # dp on 2 GPUs
    assert any(w.startswith("--sync-bn is an option of") for w in why)
    assert matrix.table(gpu).count("refused: ") == len(gpu.refused)


def test_the_docs_table_is_the_plans_own(cpu_plan):
    """docs/option-matrix.md holds the table the plan writes (``python scripts/option_matrix.py
    --plan --write-docs docs/option-matrix.md``), not a typed copy."""
    assert matrix.document(cpu_plan) in DOC.read_text()


@pytest.mark.proc
@pytest.mark.slow
def test_the_cpu_matrix_trains_or_refuses_every_row_as_planned(cpu_plan, tmp_path):
    outcomes = option_matrix.run(cpu_plan, tmp_path, timeout_s=1200)
    print("\n" + matrix.table(cpu_plan, outcomes))
    assert matrix.problems(cpu_plan, outcomes) == []
    uneven = [
        n for n, r in matrix.names(cpu_plan).items()
        if r["mode"] == "fsdp" and r["validation"] == "uneven" and n.startswith("t")
    ]  # fmt: skip
    assert uneven and all(outcomes[n].seconds < 60 for n in uneven)
