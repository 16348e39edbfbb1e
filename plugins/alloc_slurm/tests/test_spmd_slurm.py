"""DDP with gloo across two hosts: the Slurm cluster in network namespaces (h1, h2 at 10.99.0.1-2).

One allocation of 2 nodes x 2 procs; ``SPMDActor`` starts the rendezvous on rank 0 and runs a
3-step DDP training on every rank. The ranks report their torchrun variables, host, interpreter,
trained weights and the TCP sockets of their process while the group is connected, so the test
checks that MASTER_ADDR is the first node's namespace address, that the store and gloo traffic
crosses the two namespaces, and that no socket touches anything but 10.99.0.0/24 and loopback.
"""

from __future__ import annotations

import ipaddress
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from tetrarch.testing import scaled

pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0): the DDP run needs it")

SCENARIO = Path(__file__).parent / "scenarios" / "slurm_spmd.py"
#: Where the namespaces of scripts/fake-hosts live; only these and loopback may be reached.
NAMESPACES = ipaddress.ip_network("10.99.0.0/24")
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
pytestmark = [pytest.mark.transport_independent, pytest.mark.timeout(scaled(150))]


def _allowed(ip: str) -> bool:
    return ipaddress.ip_address(ip) in NAMESPACES or ipaddress.ip_address(ip) in LOOPBACK


def _lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _job_gone(cluster: Any, jobid: str) -> None:
    """The job leaves the queue and no process of it remains (bounded polls: Slurm offers nothing to wait on)."""
    deadline = time.monotonic() + scaled(30)
    while cluster.squeue(jobid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert cluster.squeue(jobid) == "", cluster.job_state(jobid)
    deadline = time.monotonic() + scaled(10)
    while True:
        left = []
        for proc in psutil.process_iter():
            try:
                if proc.environ().get("SLURM_JOB_ID") == jobid and proc.status() != psutil.STATUS_ZOMBIE:
                    left.append(proc)
            except psutil.Error:
                continue
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert left == [], [(p.pid, p.cmdline()) for p in left]


@pytest.mark.isolated
@pytest.mark.slow
def test_ddp_with_gloo_across_two_namespaced_hosts(run_scenario: Callable[..., Any], slurm_clusters: Any,
                                                   tmp_path: Path) -> None:
    cluster = slurm_clusters.get("netns")
    start = time.perf_counter()
    res = run_scenario(SCENARIO, timeout=120, env=cluster.env, cwd=tmp_path)
    took = time.perf_counter() - start
    assert res.returncode == 0, res.stdout + res.stderr
    head, where, trained, reference = _lines(res.stdout)
    ranks = {(p["hosts"], p["gpus"]): r for p, r in trained["ranks"]}
    assert sorted(ranks) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    per_rank = ", ".join(f"{k}: init {r['seconds']['init']:.1f} ddp+train {r['seconds']['train']:.1f}"
                         for k, r in sorted(ranks.items()))
    print(f"\n[netns] 2 hosts x 2 procs DDP: scenario {took:.1f} s (job and procs {where['startup_s']:.1f} s,"
          f" main {trained['train_s']:.1f} s; {per_rank})")

    # Two hosts: each pair of procs in its own namespace, with the hostname and address of that node.
    host_ip = {h: ranks[(h, 0)]["proc_ip"] for h in (0, 1)}
    assert {r["hostname"] for r in ranks.values()} == {"h1", "h2"}
    for (h, _g), r in ranks.items():
        assert r["hostname"] == r["node"] == ranks[(h, 0)]["hostname"]
        assert r["proc_ip"] == host_ip[h] and ipaddress.ip_address(r["proc_ip"]) in NAMESPACES, r
        assert r["python"] == head["python"] == sys.executable and r["torch"].startswith("2.")

    # MASTER_ADDR: the first host's namespace address, the same for every rank; torchrun's ranks per host.
    assert where["addr"] == host_ip[0] != "127.0.0.1"
    for (h, g), r in ranks.items():
        env = r["env"]
        assert env["MASTER_ADDR"] == host_ip[0], env
        assert (env["RANK"], env["WORLD_SIZE"]) == (str(2 * h + g), "4")
        assert (env["GROUP_RANK"], env["GROUP_WORLD_SIZE"]) == (str(h), "2")
        assert (env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == (str(g), "2")
        assert env["GLOO_SOCKET_IFNAME"] == "eth0", env  # the namespace's interface, set by tetrarch

    # The training: every rank holds the same weights, those of one process on the global batches.
    first = ranks[(0, 0)]["weights"]
    for r in ranks.values():
        assert r["sum"] == 6.0
        assert r["weights"] == first
    flat = [w for p in first for w in p]
    ref = [w for p in reference["reference"] for w in p]
    assert all(math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6) for a, b in zip(flat, ref, strict=True)), (flat, ref)

    # Sockets: only namespace addresses and loopback, never a wildcard or this machine's own interfaces.
    for r in ranks.values():
        ips = [ip for ip, _port in r["listen"]] + [ip for c in r["established"] for ip in (c[0], c[2])]
        assert all(_allowed(ip) for ip in ips), (r["listen"], r["established"])
    # The store and gloo cross hosts. A rank's gloo listeners: its listening ports on its node's address
    # other than tetrarch's own and the stores'. Each rank holds gloo connections with the other node
    # (to a gloo listener there, or from there to its own), sent from its namespace's eth0.
    store_ports = {int(r["env"]["MASTER_PORT"]) for r in ranks.values()}
    assert len(store_ports) == 1
    store_port = store_ports.pop()
    gloo = {key: {port for ip, port in r["listen"]
                  if ip == r["proc_ip"] and port not in (*r["own_ports"], store_port, where["port"])}
            for key, r in ranks.items()}
    assert all(gloo.values()), gloo
    for (h, g), r in ranks.items():
        other = 1 - h
        theirs = gloo[(other, 0)] | gloo[(other, 1)]
        crossing = [c for c in r["established"] if c[2] == host_ip[other]]
        assert all(c[0] == host_ip[h] for c in crossing), crossing
        links = [c for c in crossing if c[3] in theirs or c[1] in gloo[(h, g)]]
        assert len(links) >= 2, (h, g, r["established"], gloo)  # one per rank of the other host
        if h == 1:  # the run's store listens on host 0 (rank 0's proc)
            assert [host_ip[0], store_port] in [c[2:] for c in r["established"]], r["established"]

    _job_gone(cluster, head["jobid"])
