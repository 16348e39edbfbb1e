"""Faults of one node of the local test cluster (plugins/alloc_slurm/tests): cut its network, or kill it whole.

Imported by the scenarios (their folder is on ``sys.path``). The cluster is the one of
``SLURM_CONF`` (``scripts/local-slurm``): its ``layout`` file says plain or netns, its pid and
log files name each node's slurmd and the slurmstepd it spawned.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[4]
FAKE_HOSTS = REPO / "scripts" / "fake-hosts"
SESSION_ENV = "TETRARCH_TEST_SESSION"


def _dir() -> Path:
    return Path(os.environ["SLURM_CONF"]).parent


def _clean_env() -> dict[str, str]:
    """This environment without the test session's marker: a daemon we start is the cluster's, not a leak."""
    return {k: v for k, v in os.environ.items() if k != SESSION_ENV}


def netns() -> bool:
    """Whether the cluster runs each node in its own network namespace (``local-slurm start --netns``)."""
    return (_dir() / "layout").read_text().strip() == "netns"


def cut(node: str) -> None:
    """Take the node's link down (``fake-hosts cut``): no FIN, no RST, just silence.

    Raises:
        subprocess.CalledProcessError: fake-hosts failed (not the netns layout, not root).
    """
    subprocess.run([str(FAKE_HOSTS), "cut", node], check=True, capture_output=True, timeout=10, env=_clean_env())


def heal(node: str) -> None:
    """Bring the node's link up again (``fake-hosts heal``); idempotent."""
    subprocess.run([str(FAKE_HOSTS), "heal", node], check=True, capture_output=True, timeout=10, env=_clean_env())


def batch_host(jobid: str) -> str:
    """The node that runs the job's batch script (and so its ``srun``)."""
    out = subprocess.run(["scontrol", "show", "job", jobid, "-o"], capture_output=True, text=True, timeout=10,
                         check=True).stdout
    return next(w.partition("=")[2] for w in out.split() if w.startswith("BatchHost="))


def node_processes(node: str) -> list[psutil.Process]:
    """The node's slurmd, the slurmstepd it spawned (an open fd on its log) and all their descendants."""
    log = str(_dir() / "log" / f"slurmd-{node}.log")
    pid = int((_dir() / "run" / f"slurmd-{node}.pid").read_text())
    roots = [psutil.Process(pid)]
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] != "slurmstepd":
            continue
        try:
            if any(f.path == log for f in proc.open_files()):
                roots.append(proc)
        except psutil.Error:
            continue
    found: list[psutil.Process] = []
    for root in roots:
        found.append(root)
        try:
            found += root.children(recursive=True)
        except psutil.NoSuchProcess:
            continue
    return found


def kill_node(node: str) -> int:
    """SIGKILL the node's slurmd and every process of its job steps at once; returns how many."""
    procs = node_processes(node)
    for proc in procs:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            continue
    return len(procs)


def restart_node(node: str, timeout: float = 30.0) -> None:
    """Start the node's slurmd again (as ``local-slurm start`` does) and wait until the controller sees it.

    Raises:
        TimeoutError: the node does not respond within ``timeout`` seconds.
    """
    conf = os.environ["SLURM_CONF"]
    if netns():
        argv = ["nsenter", f"--net=/run/netns/{node}", "unshare", "--uts", "--", "sh", "-c",
                'hostname "$1" && exec slurmd -f "$2" -N "$1"', "sh", node, conf]
    else:
        argv = ["slurmd", "-f", conf, "-N", node]
    subprocess.run(argv, check=True, capture_output=True, timeout=30, env=_clean_env())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = subprocess.run(["sinfo", "-h", "-n", node, "-o", "%t"], capture_output=True, text=True,
                               timeout=10, check=False).stdout.strip()
        if state and not state.endswith("*") and "down" not in state:
            return
        time.sleep(0.2)  # polling Slurm's node state: it offers nothing to wait on
    raise TimeoutError(f"slurmd of {node} restarted but the controller does not see it after {timeout:g} s")
