"""1000 actors on one box: 64 procs x 16 actors (issue 33, item 3).

Spawns ``--procs`` procs (default 64) on this host and ``--actors`` actor meshes on them
(default 16: 1024 actors), then times: the procs ready, the actors ready, one
broadcast+gather round over every actor, a call on a slice, a proc killed (SIGKILL) until a
call on it fails with ``SupervisionError``, and the stop. It prints the client's resident
memory per proc and per actor, and the client's CPU time per message of the round.

The round runs twice: with relays off (``relay_min=0``: a message per actor each way) and
on (the host agent relays: a message per actor mesh each way, replies gathered). From the
direct round's cost per message and the relayed round's cost per gathered value it models
a 1024-host x 8-proc mesh: the client's work per mesh call direct and through per-host
relays, the relays' own work being spread over the hosts. The model is arithmetic on the
measured figures, printed with its assumptions; nothing of it is timed.

Run: ``python benchmarks/bench_scale.py [--procs 64] [--actors 16] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import sys
import time
from typing import Any

import psutil

sys.path.insert(0, os.path.dirname(__file__))  # bench_actors, for the procs too (the client's sys.path)

from bench_actors import Noop

import tetrarch
from tetrarch import SupervisionError, this_host
from tetrarch.config import configured


class _Faults:
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def __call__(self, failure: Any) -> None:
        self.seen.append(failure)


def _rss() -> int:
    return psutil.Process().memory_info().rss


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(procs_n: int, actors_n: int) -> dict[str, Any]:
    """One run; every figure in seconds or bytes."""
    faults = _Faults()
    tetrarch.unhandled_fault_hook = faults
    out: dict[str, Any] = {"procs": procs_n, "actors_per_proc": actors_n, "actors": procs_n * actors_n}
    host = this_host()
    t = time.perf_counter()
    host._ensure_started()
    out["host_agent_s"] = time.perf_counter() - t
    rss0 = _rss()
    t = time.perf_counter()
    pm = host.spawn_procs(per_host={"procs": procs_n})
    out["procs_ready_s"] = time.perf_counter() - t
    rss1 = _rss()
    t = time.perf_counter()
    meshes = [pm.spawn(f"noop{i}", Noop) for i in range(actors_n)]
    for m in meshes:
        m.initialized.get()
    out["actors_ready_s"] = time.perf_counter() - t
    rss2 = _rss()
    for mode, minimum in (("direct", 0), ("relayed", 2)):  # relays off, then on (one host: one relay)
        rounds, cpu_rounds = [], []
        with configured(relay_min=minimum):
            for _ in range(5):
                c, t = _cpu(), time.perf_counter()
                futures = [m.noop.call() for m in meshes]
                replies = sum(len(f.get()) for f in futures)
                rounds.append(time.perf_counter() - t)
                cpu_rounds.append(_cpu() - c)
                assert replies == procs_n * actors_n
        rounds.sort()
        cpu_rounds.sort()
        key = "" if mode == "direct" else "relayed_"
        out[f"{key}round_s"] = {"min": rounds[0], "median": rounds[len(rounds) // 2], "max": rounds[-1]}
        out[f"{key}round_client_cpu_s"] = cpu_rounds[len(cpu_rounds) // 2]
    messages = 2 * procs_n * actors_n  # direct: one out and one back per actor
    out["client_cpu_per_message_us"] = out["round_client_cpu_s"] / messages * 1e6
    # Relayed: one message out and one back per actor mesh (one host), plus a value to decode per actor.
    value_us = (out["relayed_round_client_cpu_s"] * 1e6 / actors_n - 2 * out["client_cpu_per_message_us"]) / procs_n
    out["client_cpu_per_gathered_value_us"] = max(value_us, 0.0)
    t = time.perf_counter()
    half = meshes[0].slice(procs=slice(0, procs_n // 2)).noop.call().get()
    out["slice_call_s"] = time.perf_counter() - t
    assert len(half) == procs_n // 2
    victim = meshes[0].slice(procs=procs_n - 1)
    pid = pm._procs[procs_n - 1].pid  # the proc of that rank (a benchmark may look inside)
    t = time.perf_counter()
    os.kill(pid, signal.SIGKILL)
    try:
        victim.noop.call_one().get(timeout=60)
        out["failure"] = "the call on the killed proc answered"
    except SupervisionError as exc:
        out["failure_detected_s"] = time.perf_counter() - t
        out["failure"] = str(exc).splitlines()[0][:160]
    out["killed_pid"] = pid
    t = time.perf_counter()
    pm.stop().get()
    out["stop_s"] = time.perf_counter() - t
    out["client_rss_per_proc_bytes"] = (rss1 - rss0) / procs_n
    out["client_rss_per_actor_bytes"] = (rss2 - rss1) / (procs_n * actors_n)
    out["client_rss_bytes"] = rss2
    return out


def model(per_message_us: float, per_value_us: float, hosts: int = 1024, per_host: int = 8) -> dict[str, Any]:
    """The client's CPU per mesh call over ``hosts`` x ``per_host`` procs, direct and through per-host relays.

    Assumptions: a message costs the client ``per_message_us`` whatever its size (measured on
    small messages, direct rounds); a relay's reply carries its procs' values gathered, each
    costing the client ``per_value_us`` to decode (measured: a relayed round's CPU less its
    messages, per value); relays work in parallel on their own hosts.
    """
    procs = hosts * per_host
    direct_us = 2 * procs * per_message_us
    relay_us = 2 * hosts * per_message_us + procs * per_value_us
    return {"hosts": hosts, "procs_per_host": per_host, "procs": procs,
            "client_cpu_per_call_direct_ms": direct_us / 1e3,
            "client_cpu_per_call_relayed_ms": relay_us / 1e3,
            "messages_direct": 2 * procs, "messages_relayed": 2 * hosts,
            "assumptions": model.__doc__.split("Assumptions: ", 1)[1].strip() if model.__doc__ else ""}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=64)
    parser.add_argument("--actors", type=int, default=16, help="actor meshes (actors per proc)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    figures = measure(args.procs, args.actors)
    figures["model_1024x8"] = model(figures["client_cpu_per_message_us"], figures["client_cpu_per_gathered_value_us"])
    width = max(len(k) for k in figures)
    for key, value in figures.items():
        if isinstance(value, float):
            value = f"{value:.4f}"
        print(f"{key:<{width}}  {value}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
