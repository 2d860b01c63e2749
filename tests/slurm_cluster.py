"""A one-node Slurm cluster in a temp folder, for the ``slurm``-marked tests.

``start()`` makes a private cluster out of Debian's ``slurm-wlm`` and
``munge``: a generated munge key and a ``munged`` run as the ``munge`` user
on its own socket, a generated slurm.conf naming this host as controller and
only node (more CPUs than the machine has, so several test jobs run side by
side; a partition ``lab`` with a 5-minute ``MaxTime``), and ``slurmctld`` and
``slurmd`` in the foreground with every state, spool, log and pid path in the
temp folder, on free ports. ``Cluster.stop()`` cancels its jobs (Slurm's own
step daemons end with them), then ends exactly the three daemons it started,
never anything found by name. Clients reach it through ``SLURM_CONF``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CPUS = 8  # declared to Slurm (config_overrides): enough for the test jobs to run at once
# the partition's MaxTime: a job asking for more is held with reason PartitionTimeLimit
MAX_TIME_MIN = 5
PARTITION = "lab"


def missing() -> str | None:
    """Why a cluster cannot be started here, or None."""
    for exe in ("slurmctld", "slurmd", "sbatch", "squeue", "scancel", "munged"):
        if not shutil.which(exe):
            return (
                f"{exe} not found: install Debian's slurm-wlm and munge "
                "(scripts/test.sh does, as root)"
            )
    if os.geteuid() != 0:
        return "a private Slurm cluster needs root (slurmd starts jobs as their user)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Cluster:
    root: Path
    conf: Path
    daemons: list[subprocess.Popen] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(argv),
            env=dict(os.environ, **self.env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def log_tail(self, lines: int = 30) -> str:
        out = []
        for name in ("slurmctld.log", "slurmd.log", "munged.log"):
            p = self.root / name
            if p.exists():
                out += [f"== {name}"] + p.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(out)

    def stop(self) -> None:
        """Cancel the cluster's jobs and wait for them to go, then end its three daemons and remove
        its folder: the daemons end even when cancelling the jobs fails in a way not foreseen."""
        try:
            self.run("scancel", "--full", "--partition", PARTITION, timeout=10)
            deadline = time.monotonic() + 15
            while (
                time.monotonic() < deadline
                and self.run("squeue", "-h", "-t", "R,CG,PD", timeout=10).stdout.strip()
            ):
                time.sleep(0.5)
        except (OSError, subprocess.SubprocessError):
            pass
        finally:
            self._end_daemons()

    def _end_daemons(self) -> None:
        for p in reversed(self.daemons):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.daemons):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def _conf(root: Path, host: str, munge_socket: Path) -> str:
    return "\n".join(
        [
            "ClusterName=labtest",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={munge_socket}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "MpiDefault=none",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",
            "KillWait=2",
            "MinJobAge=300",
            "InactiveLimit=0",
            "SchedulerParameters=sched_interval=2",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'slurmd.log'}",
            f"NodeName={host} NodeAddr=127.0.0.1 CPUs={CPUS} RealMemory=2000 State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes={host} Default=YES MaxTime={MAX_TIME_MIN} State=UP",
            "",
        ]
    )


def _start_munge(root: Path) -> tuple[subprocess.Popen, Path]:
    d = root / "munge"
    d.mkdir()
    d.chmod(0o755)  # munged wants its socket folder searchable by all, writable only by itself
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    shutil.chown(d, "munge", "munge")
    shutil.chown(key, "munge", "munge")
    sock = d / "munge.socket"
    log = root / "munged.log"
    log.touch()
    shutil.chown(log, "munge", "munge")
    p = subprocess.Popen(
        [
            "munged",
            "--foreground",
            f"--key-file={key}",
            f"--socket={sock}",
            f"--pid-file={d / 'munged.pid'}",
            f"--log-file={log}",
            f"--seed-file={d / 'seed'}",
        ],
        user="munge",
        group="munge",
        extra_groups=[],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return p, sock


def _wait(pred, timeout: float, what: str, cluster: Cluster) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        if any(p.poll() is not None for p in cluster.daemons):
            break
        time.sleep(0.3)
    raise RuntimeError(f"the test Slurm cluster did not come up ({what}):\n{cluster.log_tail()}")


def start() -> Cluster:
    """A running one-node cluster; raises RuntimeError with the daemons' logs when it does not come
    up."""
    root = Path(tempfile.mkdtemp(prefix="lab-slurm-"))
    root.chmod(0o755)  # munged runs as the munge user and must reach its folder
    host = socket.gethostname().split(".")[0]
    for d in ("state", "spool"):
        (root / d).mkdir()
    cluster = Cluster(root, root / "slurm.conf")
    try:
        munged, sock = _start_munge(root)
        cluster.daemons.append(munged)
        _wait(sock.exists, 20, "munged", cluster)
        cluster.conf.write_text(_conf(root, host, sock))
        for daemon in (["slurmctld", "-D", "-i"], ["slurmd", "-D", "-N", host]):
            cluster.daemons.append(
                subprocess.Popen(
                    daemon + ["-f", str(cluster.conf)],
                    env=dict(os.environ, **cluster.env),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        _wait(
            lambda: cluster.run("sinfo", "-h", "-o", "%T").stdout.strip() in ("idle", "mixed"),
            60,
            "node idle",
            cluster,
        )
    except BaseException:
        cluster.stop()
        raise
    return cluster
