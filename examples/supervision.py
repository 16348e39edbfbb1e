"""Supervision: failures travel to the owner of a mesh, not to whoever happens to call it.

Part 1: a ``Manager`` actor spawns a mesh of ``Worker`` actors on procs the client hands
it, so the manager owns that mesh. One worker fails on purpose inside a ``broadcast``
(an exception with no caller to receive it kills the actor). The manager's
``__supervise__`` records the ``MeshFailure`` and returns True (handled): the manager
lives on, its worker mesh is unhealthy as a whole, and a slice without the failed rank
still works. The client, calling the dead worker through a reference to the mesh, gets
``SupervisionError``; the failure itself went to the owner only.

Part 2: a second manager does not handle the failure (``__supervise__`` returns False),
so the manager itself fails and the chain reaches the client's
``tetrarch.unhandled_fault_hook``, which here records and prints it instead of ending
the client.

Run with ``python examples/supervision.py`` (inside the venv). The failures are on
purpose: the procs print their tracebacks on stderr.
"""

from __future__ import annotations

import asyncio
import threading
import time

import tetrarch
from tetrarch import (
    Actor,
    MeshFailure,
    ProcMesh,
    SupervisionError,
    context,
    current_rank,
    endpoint,
    this_host,
)


class Worker(Actor):
    @endpoint
    def ping(self) -> int:
        return context().actor_instance.rank["gpus"]  # where it was spawned

    @endpoint
    def step(self, fail_rank: int, how: str = "raise") -> None:
        if current_rank()["gpus"] == fail_rank:
            if how == "abort":
                context().actor_instance.abort(f"rank {fail_rank} gave up on purpose")
            else:
                raise ValueError(f"rank {fail_rank} fails on purpose")


class Manager(Actor):
    """Owns a mesh of workers on the procs it is given; ``handle`` decides its fate."""

    def __init__(self, procs: ProcMesh, handle: bool) -> None:
        self.workers = procs.spawn("workers", Worker)  # spawned here: this actor owns it
        self.handle = handle
        self.seen: list[str] = []

    def __supervise__(self, failure: MeshFailure) -> bool:
        # Runs on this actor's loop, between messages or while an async endpoint awaits.
        self.seen.append(f"{failure.mesh_name} rank {failure.rank}: {failure.cause}")
        return self.handle  # True: handled, the manager lives on; False: it fails too

    @endpoint
    def run(self, fail_rank: int, how: str) -> None:
        self.workers.initialized.get()
        self.workers.step.broadcast(fail_rank, how)  # no reply port: a raise kills the worker

    @endpoint
    async def failures(self, at_least: int, timeout: float = 10.0) -> list[str]:
        """The failures ``__supervise__`` saw, once there are ``at_least`` of them."""
        deadline = time.monotonic() + timeout
        # Polls on purpose: each await is a safe point where __supervise__ may run.
        while len(self.seen) < at_least and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        return list(self.seen)

    @endpoint
    def probe(self) -> dict[str, str]:
        """What the owner's worker mesh looks like after the failure."""
        out = {}
        try:
            self.workers.ping.call().get()
            out["whole mesh"] = "ok"
        except SupervisionError as err:
            out["whole mesh"] = str(err).split(" (", 1)[0]
        out["slice gpus=0"] = f"ok, rank {self.workers.slice(gpus=0).ping.call_one().get()}"
        out["choose()"] = f"ok, rank {self.workers.ping.choose().get()}"  # avoids failed ranks
        return out

    @endpoint
    def workers_ref(self) -> Worker:
        return self.workers  # a reference: failures still go to this actor, not the caller


def part1(manager_procs: ProcMesh, worker_procs: ProcMesh) -> int:
    print("== part 1: the owner handles a failure")
    manager = manager_procs.spawn("manager", Manager, worker_procs, True)
    manager.run.call_one(fail_rank=1, how="raise").get()
    seen = manager.failures.call_one(1).get()
    for line in seen:
        print("  manager.__supervise__ saw:", line)
    for what, result in manager.probe.call_one().get().items():
        print(f"  manager calls {what}: {result}")
    ref = manager.workers_ref.call_one().get()
    try:
        ref.slice(gpus=1).ping.call_one().get(timeout=10)
    except SupervisionError as err:
        print("  client calls the failed worker through a reference:", err)
    print("  the manager still answers:", len(manager.failures.call_one(1).get()), "failure(s) recorded")
    manager.stop().get()  # stops the worker mesh it owns first
    return len(seen)


def part2(manager_procs: ProcMesh, worker_procs: ProcMesh) -> int:
    print("== part 2: an unhandled failure reaches the client's fault hook")
    got: list[MeshFailure] = []
    arrived = threading.Event()

    def record(failure: MeshFailure) -> None:  # runs on a client thread, once per failed rank
        print("  the hook got:", failure)
        print("  " + failure.report().replace("\n", "\n  "))
        got.append(failure)  # record it, and let the client go on
        arrived.set()

    tetrarch.unhandled_fault_hook = record  # the default prints the report and exits 1
    manager = manager_procs.spawn("strict_manager", Manager, worker_procs, False)
    manager.run.call_one(fail_rank=0, how="abort").get()
    if not arrived.wait(10):
        raise SystemExit("no failure reached the fault hook")
    root = got[0].root_event
    print(f"  root event: {root.actor} of mesh {root.mesh_name!r}: {root.cause}")
    try:
        manager.failures.call_one(1).get()
    except SupervisionError as err:
        print("  calling the failed manager:", str(err).split(" (", 1)[0])
    return len(got)


def main() -> None:
    start = time.monotonic()
    manager_procs = this_host().spawn_procs(name="manager_procs")
    worker_procs = this_host().spawn_procs(per_host={"gpus": 2}, name="worker_procs")
    handled = part1(manager_procs, worker_procs)
    unhandled = part2(manager_procs, worker_procs)
    manager_procs.stop().get()
    worker_procs.stop().get()
    print(f"  (both parts took {time.monotonic() - start:.1f} s)")
    print(f"supervision: the manager handled {handled} failure; the fault hook recorded {unhandled}")


if __name__ == "__main__":
    main()
