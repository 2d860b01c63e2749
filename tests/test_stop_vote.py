"""DDP's stop vote (training.distributed.StopVote): asynchronous, on a CPU tensor over a gloo group
of its own, so DDP pays no host-device sync the other modes do not; each vote reads the one
before. One in-process rank (a world of 1, gloo, a FileStore): no process is started."""

from __future__ import annotations

import torch
import torch.distributed as dist

from training.distributed import StopVote


def test_the_vote_is_asynchronous_on_the_cpu_and_answers_one_vote_later(tmp_path):
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        vote = StopVote()
        assert vote.group is not None
        assert vote(True) is False  # started, not waited for
        work, t = vote._pending
        assert t.device == torch.device("cpu") and hasattr(work, "wait")
        assert vote(False) is True  # the previous vote's answer
        assert vote(False) is False
        vote.close()
        assert vote._pending is None
    finally:
        dist.destroy_process_group()


def test_outside_ddp_the_flag_itself():
    vote = StopVote()
    assert vote(True) is True and vote(False) is False
    vote.close()
