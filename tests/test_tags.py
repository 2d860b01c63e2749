"""The lab's tag names (lab/tags.py) are the trainer's (training/ imports nothing of the lab):
a real short run of the trainer writes no tag the lab does not name, and every name the lab reads
from the trainer is written."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from lab import tags
from lab.events import RunReader
from lab.runfolder import REPO_ROOT
from training import metrics

TRAINER_TAGS = {
    tags.TRAIN_LOSS,
    tags.TRAIN_ACC,
    tags.VAL_LOSS,
    tags.VAL_ACC,
    tags.TRAIN_LR,
    tags.GRAD_NORM,
    tags.SAMPLES_PER_SEC,
    tags.STEP_TIME_MS,
    tags.DATA_TIME_MS,
    tags.EPOCH_TIME_S,
}
MEM = re.compile(re.escape(tags.MEM) + r"[a-z]+\d+/(allocated|peak|reserved|peak_reserved)_mib$")


@pytest.mark.proc
def test_the_trainer_writes_the_names_the_lab_reads(tmp_path):
    argv = [sys.executable, "-m", "training.train", "--epochs", "1", "--log-every", "5"]
    argv += ["--image-size", "16", "--batch-size", "32", "--checkpoint", "none"]
    argv += ["--grad-norm-warn", "1e-9", "--device", "cpu", "--log-dir", str(tmp_path)]
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    subprocess.run(argv, cwd=REPO_ROOT, env=env, check=True, capture_output=True, timeout=300)
    reader = RunReader(tmp_path / "tb")
    reader.refresh()
    written = set(reader.scalars())
    known = TRAINER_TAGS | {tags.GRAD_NORM_WARNING}
    assert not {t for t in written if t not in known and not MEM.match(t)}, written
    assert TRAINER_TAGS <= written, TRAINER_TAGS - written
    assert tags.GRAD_NORM_WARNING in written  # every step passed the tiny warning line
    assert any(MEM.match(t) for t in written), written
    assert metrics.RATE_TAG == tags.SAMPLES_PER_SEC


def test_the_name_builders_spell_designs_patterns():
    assert tags.sys_gpu(3, "util_pct") == "sys/gpu3/util_pct"
    assert tags.mem("cuda0", "peak_mib") == "mem/cuda0/peak_mib"
    assert tags.health("stalled") == "health/stalled"
