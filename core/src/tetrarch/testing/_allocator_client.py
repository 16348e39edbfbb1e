"""The client program of the allocator kit: ``python -m tetrarch.testing._allocator_client CHECK CONFIG``.

A fresh tetrarch client per check (:mod:`tetrarch.testing.allocator`): its own transport,
settings and fault hook, and a process the kit may SIGKILL. ``CONFIG`` is a base64 pickle of
a dict: ``allocator`` (the backend's name), ``options`` (``AllocRequest.options``), ``hosts``,
``run`` (the value of :data:`RUN_ENV` every process of the allocation gets), ``bound`` (nominal
seconds an expected event may take) and, for ``bad_options``, ``cases`` (a list of options).

It reports on stdout, one JSON object a line after :data:`PREFIX` (procs' own output, which
reaches the client too, cannot be mistaken for it). Checks:

``serve``
    ``AllocatorJob({"hosts": N})``, a proc per host, a ``Probe`` actor on each; reports who
    answered, the allocator's ``spans_hosts``, capabilities and ``client_host``, then
    ``job.kill()`` and how long it took.
``agent_killed``
    As ``serve``; then the proc of ``hosts=0`` SIGKILLs its host agent during a call. Reports
    how that call ended and how soon, whether ``hosts=1`` still answers, what a new
    ``spawn_procs`` on the mesh raises, the failures at the fault hook, and ``job.kill()``.
``hold``
    As ``serve``, then reports ``holding`` and reads stdin until it closes (the kit SIGKILLs it).
``exit_reports``
    The allocator alone (``get_allocator(name).allocate``): core's host agent with a client
    address nobody listens on, so each agent exits by itself. Reports every ``on_exit(index,
    info)`` call and ``Allocation.stop()``, called twice.
``bad_options``
    For each options of ``cases``: ``AllocatorJob({"hosts": 1}, options=...).apply()``; reports
    the exception (type, message) or that the job started.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import socket
import sys
import time
from typing import Any

__all__ = ["PREFIX", "RUN_ENV", "encode"]

#: What starts each line of the client's reports.
PREFIX = "@tetrarch-allocator-kit@ "
#: The variable every process of the allocation under test carries (``AllocatorJob(env=...)``).
RUN_ENV = "ALLOCATOR_KIT_RUN"  # no TETRARCH_ prefix: those name settings (tests/config)


def encode(config: dict[str, Any]) -> str:
    """``config`` as the client's ``CONFIG`` argument."""
    return base64.b64encode(pickle.dumps(config)).decode()


def emit(**fields: Any) -> None:
    print(PREFIX + json.dumps(fields, default=repr), flush=True)


def _error(exc: BaseException) -> dict[str, str]:
    return {"type": type(exc).__name__, "message": str(exc)}


def _job(cfg: dict[str, Any], hosts: int, options: Any = None) -> Any:
    from tetrarch.job import AllocatorJob

    return AllocatorJob({"hosts": hosts}, allocator=cfg["allocator"],
                        options=cfg["options"] if options is None else options, env={RUN_ENV: cfg["run"]})


def _answers(values: Any) -> list[dict[str, Any]]:
    return [value for _point, value in sorted(values.items(), key=lambda pv: pv[1]["rank"]["hosts"])]


def _serve(cfg: dict[str, Any]) -> tuple[Any, Any, Any]:
    """Start the job, a proc and a ``Probe`` per host; report who answered. Returns (job, host mesh, probes)."""
    from tetrarch.plugins import BackendKind, get_allocator, get_registry
    from tetrarch.testing._allocator_actors import Probe

    bound = cfg["bound"]
    job = _job(cfg, cfg["hosts"])
    start = time.monotonic()
    hosts = job.state().hosts
    emit(started=time.monotonic() - start, extent=dict(zip(hosts.extent.labels, hosts.extent.sizes, strict=True)))
    start = time.monotonic()
    procs = hosts.spawn_procs(per_host={"procs": 1})
    probes = procs.spawn("allocator_kit_probe", Probe)
    values = probes.whoami.call().get(timeout=bound)
    emit(answered=time.monotonic() - start, answers=_answers(values))
    allocator = get_allocator(cfg["allocator"])
    row = get_registry().status(BackendKind.ALLOCATOR, cfg["allocator"])
    client_host = allocator.client_host(cfg["options"]) if allocator.spans_hosts else None
    capabilities = sorted(str(c) for c in (row.spec.capabilities if row.spec else ()))
    emit(spans_hosts=allocator.spans_hosts, capabilities=capabilities,
         client_host=client_host, hostname=socket.gethostname())
    return job, hosts, probes


def _kill(job: Any) -> None:
    start = time.monotonic()
    job.kill()
    emit(killed=time.monotonic() - start)


def check_serve(cfg: dict[str, Any]) -> None:
    job, _hosts, _probes = _serve(cfg)
    _kill(job)


def check_agent_killed(cfg: dict[str, Any]) -> None:
    import tetrarch
    from tetrarch import SupervisionError

    bound = cfg["bound"]
    faults: list[str] = []
    tetrarch.unhandled_fault_hook = lambda failure: faults.append(str(failure))  # the kills are on purpose
    job, hosts, probes = _serve(cfg)
    pending = probes.slice(hosts=0).kill_agent_and_wait.call_one(4 * bound)
    start = time.monotonic()
    try:
        outcome: Any = pending.get(timeout=2 * bound)
    except BaseException as exc:  # noqa: BLE001 - reported: the kit asserts what it was
        outcome = _error(exc)
    emit(pending=outcome, pending_s=time.monotonic() - start)
    if cfg["hosts"] > 1:
        try:
            survivor: Any = probes.slice(hosts=1).whoami.call_one().get(timeout=bound)["pid"]
        except BaseException as exc:  # noqa: BLE001 - reported
            survivor = _error(exc)
        emit(survivor=survivor)
    start = time.monotonic()
    try:
        hosts.spawn_procs(per_host={"procs": 1})
        respawn: Any = "spawned"
    except SupervisionError as exc:
        respawn = _error(exc)
    except BaseException as exc:  # noqa: BLE001 - reported
        respawn = _error(exc)
    emit(respawn=respawn, respawn_s=time.monotonic() - start)
    _kill(job)
    emit(faults=faults)


def check_hold(cfg: dict[str, Any]) -> None:
    _serve(cfg)
    emit(holding=os.getpid())
    sys.stdin.read()  # until the kit kills this process


def check_exit_reports(cfg: dict[str, Any]) -> None:
    from tetrarch._config import ENV_ALLOC_ID, ENV_ALLOC_TRANSPORT, ENV_CLIENT_ADDR
    from tetrarch.plugins import AgentCommand, AllocRequest, get_allocator
    from tetrarch.plugins.allocator import HOST_AGENT_MODULE
    from tetrarch.testing import Collector

    hosts, bound = cfg["hosts"], cfg["bound"]
    with socket.socket() as reserved:  # bound, never listening: each agent's dial is refused
        reserved.bind(("127.0.0.1", 0))
        nobody = f"tcp://127.0.0.1:{reserved.getsockname()[1]}"
        env = {**os.environ, RUN_ENV: cfg["run"], ENV_CLIENT_ADDR.name: nobody, ENV_ALLOC_TRANSPORT.name: "tcp",
               ENV_ALLOC_ID.name: f"allocator-kit-{cfg['run']}"}
        command = AgentCommand((sys.executable, "-m", HOST_AGENT_MODULE), env, secret=os.urandom(32))
        reports: Collector[tuple[int, Any]] = Collector("on_exit reports")
        allocator = get_allocator(cfg["allocator"])
        start = time.monotonic()
        allocation = allocator.allocate(AllocRequest(hosts, command, "allocator_kit", cfg["options"]),
                                        lambda index, info: reports.add((index, info)))
        emit(allocated=time.monotonic() - start)
        try:
            got = reports.wait(hosts, timeout=bound)
            emit(reported=time.monotonic() - start)
        except TimeoutError as exc:
            got = reports.items
            emit(timeout=str(exc))
        finally:
            stop_start = time.monotonic()
            allocation.stop(grace=2.0)
            allocation.stop(grace=2.0)  # idempotent
            emit(stopped=time.monotonic() - stop_start)
    after = reports.items
    emit(reports=[{"index": i, "returncode": info.returncode, "describe": info.describe(), "type": type(info).__name__}
                  for i, info in after], before_stop=len(got))


def check_bad_options(cfg: dict[str, Any]) -> None:
    for options in cfg["cases"]:
        job = _job(cfg, 1, options)
        start = time.monotonic()
        try:
            job.apply()
        except Exception as exc:  # noqa: BLE001 - reported: the kit asserts what it was
            emit(options=repr(options), refused=_error(exc), seconds=time.monotonic() - start)
            continue
        emit(options=repr(options), accepted=True)
        job.kill()


CHECKS = {"serve": check_serve, "agent_killed": check_agent_killed, "hold": check_hold,
          "exit_reports": check_exit_reports, "bad_options": check_bad_options}


def main() -> int:
    cfg = pickle.loads(base64.b64decode(sys.argv[2]))
    CHECKS[sys.argv[1]](cfg)
    emit(done=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
