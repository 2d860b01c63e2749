"""The failures the lab knows: ``KNOWN``, each a key, a signature in the logs, the cause in one
sentence and the fix.

The table holds the failures the seeds quote (a port or address that cannot be had, a driver too
old, out of memory, two ranks on one GPU, a collective timeout, unused parameters under DDP, a
checkpoint's ``module.`` prefix, bad device_ids, DP's scatter/gather sizes, tensors on different
devices, NCCL, a batch that does not split, a NaN loss under ``--stop-on-nan``, a full disk,
SIGKILL). Order matters: the specific before the generic. ``lab.engine.supervise.diagnose`` matches
it.
"""

from __future__ import annotations

import re


class _PrefixOnly:
    """Finds a state dict that misses the model's keys only by DataParallel/DDP's ``module.``
    prefix.

    Either the trainer's own refusal says so, or PyTorch's load_state_dict
    error lists Missing and Unexpected keys that are equal once ``module.`` is
    stripped from both (a real mismatch of layers is left to the generic entries).
    """

    _SAID = re.compile(r"only by the 'module\.' prefix")
    _LISTS = re.compile(
        r"Missing key\(s\) in state_dict:(.*?)Unexpected key\(s\) in state_dict:([^\n]*)", re.S
    )

    def search(self, text: str) -> re.Match[str] | None:
        said = self._SAID.search(text)
        if said:
            return said
        for m in self._LISTS.finditer(text):
            missing, unexpected = (
                {k.removeprefix("module.") for k in re.findall(r'"([^"]+)"', g)} for g in m.groups()
            )
            if missing and missing == unexpected:
                return m
        return None


_RANK_LOGS = "python -m lab logs RUN --rank N"
# (key, pattern, cause, fix). Order matters: the specific before the generic.
KNOWN: list[tuple[str, re.Pattern[str] | _PrefixOnly, str, str]] = [
    (
        "port_in_use",
        re.compile(r"address already in use|EADDRINUSE|errno 98", re.I),
        "The rendezvous/master port was already taken by another process, so the job could not "
        "start.",
        "Launch again (the lab picks a free port per job), or free the port / pass another "
        "--master-port.",
    ),
    # a client's "failed to connect ... errno: 99" is a retried warning, not this
    (
        "address_unavailable",
        re.compile(
            r"^(?!.*client socket).*(?:\[Errno 99\]|errno:? 99\b).*Cannot assign requested address",
            re.I | re.M,
        ),
        "A socket could not be bound to the requested address (errno 99): the rendezvous/master "
        "host is not an address of this machine.",
        "On node 0 give one of its own addresses (`ip -brief addr`; 127.0.0.1 on one machine) as "
        "--master-addr or the "
        "rendezvous host, and the same address on the other nodes; a host name may resolve to an "
        "old address (/etc/hosts).",
    ),
    (
        "disk_full",  # the trainer's line (training.diskfull), or any program's OSError 28/122
        re.compile(
            r"error: disk full: |No space left on device|Disk quota exceeded|\[Errno (?:28|122)\]"
            r"|\bENOSPC\b|\bEDQUOT\b"
        ),
        "The disk holding the run folder is full: a write failed with ENOSPC.",
        "Free space on that disk (old runs' checkpoints/ and tb/ folders are the big ones) or "
        "point LAB_RUNS_DIR at a folder on a disk with room, then launch again (resume from the "
        "kept checkpoints/last.pt to go on from there).",
    ),
    (
        "driver_too_old",
        re.compile(
            r"NVIDIA driver on your system is too old|CUDA driver version is "
            r"insufficient|cudaErrorInsufficientDriver",
            re.I,
        ),
        "The NVIDIA driver is older than the CUDA version this PyTorch was built for, so CUDA "
        "could not start.",
        "Update the NVIDIA driver (nvidia-smi shows the newest CUDA it supports), or install a "
        "PyTorch built for that "
        "CUDA version; the pre-flight compares the two before a run starts.",
    ),
    (
        "cuda_oom",
        re.compile(r"CUDA out of memory|torch\.OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED", re.I),
        "A GPU ran out of memory.",
        "Lower the batch size or image size, turn on --amp, or use more GPUs (DDP splits the "
        "batch); in DP the first GPU needs the most.",
    ),
    (
        "duplicate_gpu",
        re.compile(r"Duplicate GPU detected", re.I),
        "Two ranks were bound to the same GPU, which NCCL refuses: "
        "torch.cuda.set_device(local_rank) was not called "
        "before init_process_group, a device is hard-coded (cuda:0), or fewer GPUs are visible "
        "than processes.",
        "In each rank call torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) before "
        "init_process_group and use that "
        "device everywhere; start one process per visible GPU (--nproc-per-node = the number of "
        "GPUs).",
    ),
    (
        "collective_timeout",
        re.compile(
            r"collective operation timeout|Timed out waiting \d+\s*ms for "
            r"(?:recv|send)|DistTimeoutError",
            re.I,
        ),
        "A rank waited in a collective (all-reduce, barrier, ...) longer than the timeout: "
        "another rank had died, hung, "
        "or took a different path through the code and never joined it.",
        f"Look at where the other ranks were (their stacks; their logs: {_RANK_LOGS}); make every "
        "rank call the same "
        "collectives in the same order (none inside `if rank == 0`, the same number of batches "
        "everywhere); raise "
        "--dist-timeout only when one rank is slow on purpose (e.g. rank 0 evaluating alone).",
    ),
    (
        "unused_parameters",
        re.compile(
            r"Expected to have finished reduction in the prior iteration|did not receive grad for "
            r"rank",
            re.I,
        ),
        "DDP waited for the gradients of parameters the forward did not use: a skipped layer or "
        "branch left the "
        "previous step's all-reduce unfinished.",
        "Use every parameter in forward (drop the unused layer, or freeze it with "
        "requires_grad_(False)), or wrap with "
        "DistributedDataParallel(model, find_unused_parameters=True) (slower); "
        "TORCH_DISTRIBUTED_DEBUG=DETAIL names them.",
    ),
    (
        "state_dict_prefix",
        _PrefixOnly(),
        "The checkpoint's model keys differ from the model's only by the 'module.' prefix: it was "
        "saved from (or is "
        "loaded into) a DataParallel/DDP wrapper instead of the model inside.",
        "Save model.module.state_dict() (the unwrapped model), or strip the prefix when loading: "
        "{k.removeprefix('module.'): v for k, v in sd.items()} (add it instead when loading into "
        "the wrapper).",
    ),
    (
        "bad_device_ids",
        re.compile(
            r"output_device\b.*\bmust be in device_ids|device_ids can only be None or contain a "
            r"single element|"
            r"device_ids and output_device arguments only work with|module must have its "
            r"parameters and buffers on "
            r"device|invalid device ordinal|AssertionError: Invalid device id",
            re.I,
        ),
        "The device_ids/output_device given to DataParallel or DistributedDataParallel do not fit "
        "the devices: a GPU "
        "index CUDA_VISIBLE_DEVICES renumbered away, several device_ids for DDP, device_ids for a "
        "CPU model, or the "
        "module on a GPU other than device_ids[0].",
        "DDP: device_ids=[local_rank] on GPUs and none on the CPU; DP: move the model to "
        "device_ids[0] before wrapping, "
        "with indices counted after CUDA_VISIBLE_DEVICES (0..n-1) and output_device among them.",
    ),
    (
        "dp_scatter_sizes",
        re.compile(
            r"Sizes of tensors must match except in dimension 0|gather got an input of invalid "
            r"size",
            re.I,
        ),
        "Tensors joined along the batch dimension differ in another one: DataParallel scatters "
        "every input along "
        "dimension 0 and gathers the replicas' outputs along it, so a tensor that is not "
        "batch-first (or a non-batch "
        "tensor passed to forward and split too) gives the replicas different shapes.",
        "Pass only batch-first tensors to forward (keep fixed tables as module buffers), return "
        "batch-first outputs "
        "(or give DataParallel dim= for time-first ones) and a batch that splits evenly; DDP has "
        "no scatter/gather.",
    ),
    (
        "different_devices",
        re.compile(r"Expected all tensors to be on the same device", re.I),
        "A tensor was on a different device than the model (e.g. the loss or the inputs left on "
        "the CPU).",
        "Move the inputs, targets and criterion to the model's device (in DDP: "
        "torch.cuda.set_device(local_rank) before init_process_group).",
    ),
    (
        "nccl",
        re.compile(
            r"NCCL error|ncclInternalError|ncclUnhandledCudaError|ncclSystemError"
            r"|ProcessGroupNCCL.*(?:timeout|Watchdog)|NCCL WARN",
            re.I,
        ),
        "NCCL, the GPU communication library, failed between ranks.",
        "Rerun with NCCL_DEBUG=INFO in the extra environment; check all GPUs are visible and "
        "healthy (nvidia-smi), and try NCCL_P2P_DISABLE=1.",
    ),
    (
        "batch_split",
        re.compile(r"does not split|not divisible|must be divisible", re.I),
        "The global batch does not split evenly over the devices/processes.",
        "Use a batch size that is a multiple of the number of GPUs/processes.",
    ),
    (
        "nan_loss",  # the trainer's --stop-on-nan line
        re.compile(r"train/loss is (?:nan|inf|-inf) at step \d+"),
        "train/loss turned NaN or infinite (--stop-on-nan ended the run): the training diverged.",
        "Lower the learning rate (e.g. by 10x), add warm-up or gradient clipping; with --amp "
        "check the GradScaler.",
    ),
    (
        "killed",
        re.compile(
            r"exitcode\s*:\s*-9\b|Signal 9 \(SIGKILL\)|killed by signal 9|SIGKILL|exit code "
            r"-9|^Killed$",
            re.I | re.M,
        ),
        "A process was killed with signal 9 (SIGKILL): usually the host ran out of memory and the "
        "kernel's OOM killer ended it, or someone ran kill -9.",
        "Lower the batch size, image size or DataLoader workers; check `dmesg` for 'Out of "
        "memory'.",
    ),
]
