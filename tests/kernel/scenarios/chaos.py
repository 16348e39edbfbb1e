"""Scenario: procs serving a stream of calls are SIGKILLed and replaced (see ``test_chaos.py``).

``python chaos.py KILL_TO_ERROR_S``: a call that ends with ``SupervisionError`` must end
at most this many seconds (already scaled by the test) after its worker's kill. Prints
its figures as one line, ``CHAOS_FIGURES <json>``; the test judges them. ``CHAOS_SEED``
in the environment replays a run.

Bounds that only catch hangs are nominal seconds passed through ``scaled``; the shape of
the workload (slots, callers, kill pace) is not scaled.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import random
import signal
import statistics
import sys
import threading
import time
from typing import Any

import psutil

import tetrarch
from chaos_actors import ChaosWorker
from tetrarch import Future, MeshFailure, ProcMesh, SupervisionError, shutdown_context, this_host
from tetrarch.testing import Collector, scaled

SLOTS = 8  # one-proc meshes serving calls
CALLERS = 6  # threads issuing calls
WINDOW = 4  # calls each caller keeps in flight
KILL_EVERY_S = 0.5  # pace of the killer
KILL_FOR_S = 13.0  # how long the killer runs (about 25 kills) ...
MIN_KILLS = 20  # ... and it goes on until it made at least this many kills (a slow machine spawns slowly)
MIN_CALLS = 1000  # callers go on (up to EXTRA_S more) until this many calls were made
EXTRA_S = 20.0  # nominal seconds (scaled)
HANG_S = 15.0  # a call not done this long (nominal seconds, scaled) after it was issued is a hang


class Gen:
    """One generation of a slot: a one-proc mesh, its worker, and when it was killed."""

    __slots__ = ("name", "procs", "mesh", "pid", "killed_at", "stop_fut", "stop_started", "stop_done")

    def __init__(self, name: str, procs: ProcMesh, mesh: Any, pid: int) -> None:
        self.name, self.procs, self.mesh, self.pid = name, procs, mesh, pid
        self.killed_at: float | None = None
        self.stop_fut: Future[None] | None = None
        self.stop_started: float | None = None
        self.stop_done: float | None = None


def spawn(slot: int, n: int) -> Gen:
    name = f"s{slot}g{n}"
    procs = this_host().spawn_procs(per_host={"procs": 1}, name=name)
    mesh = procs.spawn(name, ChaosWorker)
    return Gen(name, procs, mesh, mesh.pid.call_one().get(timeout=scaled(30)))


class Call:
    __slots__ = ("gen", "token", "issued", "resolved", "outcome", "detail")

    def __init__(self, gen: Gen, token: int) -> None:
        self.gen, self.token, self.issued = gen, token, time.monotonic()
        self.resolved: float | None = None
        self.outcome: str | None = None
        self.detail: str | None = None

    def done(self, _fut: object = None) -> None:
        if self.resolved is None:
            self.resolved = time.monotonic()


class Chaos:
    """The slots, the callers and the killer, and what they recorded."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        #: (monotonic time, mesh name, cause) per failure that reached the fault hook
        self.hooked: Collector[tuple[float, str, str]] = Collector("failures at the fault hook")
        self.all_gens: list[Gen] = []
        self.slots: list[Gen] = []
        self.calls: Collector[Call] = Collector("settled calls")
        self.tokens = itertools.count()
        self.stop_calling = threading.Event()
        self.thread_errors: list[str] = []
        self.kills: list[str] = []
        self.spawn_s: list[float] = []
        self.hang_s = scaled(HANG_S)

    def hook(self, failure: MeshFailure) -> None:
        self.hooked.add((time.monotonic(), failure.mesh_name, failure.cause))

    def settle(self, rec: Call, fut: Future[Any]) -> None:
        left = max(0.0, rec.issued + self.hang_s - time.monotonic())
        try:
            value = fut.get(timeout=left)
        except TimeoutError:
            rec.outcome, rec.detail = "hang", f"{rec.gen.name} token {rec.token} not done after {self.hang_s} s"
        except SupervisionError as exc:
            rec.done()
            rec.outcome, rec.detail = "supervision", str(exc)[:300]
        except BaseException as exc:  # noqa: BLE001 - anything else is a wrong outcome
            rec.done()
            rec.outcome, rec.detail = "other", f"{type(exc).__name__}: {exc}"[:300]
        else:
            rec.done()
            if value == (rec.token, rec.gen.pid):
                rec.outcome = "ok"
            else:
                rec.outcome, rec.detail = "wrong", f"{rec.gen.name} token {rec.token}: got {value!r}"
        self.calls.add(rec)

    def caller(self, seed: float) -> None:
        rng = random.Random(seed)
        pending: collections.deque[tuple[Call, Future[Any]]] = collections.deque()
        try:
            while not self.stop_calling.is_set():
                gen = self.slots[rng.randrange(SLOTS)]
                rec = Call(gen, next(self.tokens))
                try:
                    fut = gen.mesh.work.call_one(rec.token, rng.uniform(0.0, 0.05))
                except SupervisionError as exc:  # the worker is already known dead: fails fast
                    rec.done()
                    rec.outcome, rec.detail = "supervision", str(exc)[:300]
                    self.calls.add(rec)
                    continue
                fut.add_done_callback(rec.done)
                pending.append((rec, fut))
                if len(pending) >= WINDOW:
                    self.settle(*pending.popleft())
            while pending:
                self.settle(*pending.popleft())
        except BaseException as exc:  # noqa: BLE001
            self.thread_errors.append(f"caller: {type(exc).__name__}: {exc}")

    def killer(self, seed: float) -> None:
        rng = random.Random(seed)
        pace = threading.Event()  # never set: wait() only paces the kills
        counters = [1] * SLOTS
        next_kill = time.monotonic() + KILL_EVERY_S
        end = time.monotonic() + KILL_FOR_S
        give_up = end + scaled(30)
        try:
            while (time.monotonic() < end or len(self.kills) < MIN_KILLS) and time.monotonic() < give_up:
                pace.wait(max(0.0, next_kill - time.monotonic()))
                next_kill = time.monotonic() + KILL_EVERY_S
                slot = rng.randrange(SLOTS)
                old = self.slots[slot]
                old.killed_at = time.monotonic()
                os.kill(old.pid, signal.SIGKILL)
                self.kills.append(old.name)
                s = time.monotonic()
                new = spawn(slot, counters[slot])
                self.spawn_s.append(time.monotonic() - s)
                counters[slot] += 1
                self.all_gens.append(new)
                self.slots[slot] = new
                old.stop_started = time.monotonic()
                old.stop_fut = old.procs.stop()  # stopping a mesh whose proc is dead must work
                old.stop_fut.add_done_callback(lambda _f, g=old: setattr(g, "stop_done", time.monotonic()))
        except BaseException as exc:  # noqa: BLE001
            self.thread_errors.append(f"killer: {type(exc).__name__}: {exc}")


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def main(kill_to_error_s: float) -> None:
    seed = int(os.environ.get("CHAOS_SEED", "0")) or random.SystemRandom().randrange(1, 2**31)
    chaos = Chaos(seed)
    tetrarch.unhandled_fault_hook = chaos.hook

    t0 = time.monotonic()
    for i in range(SLOTS):
        chaos.slots.append(spawn(i, 0))
    chaos.all_gens.extend(chaos.slots)
    setup_s = time.monotonic() - t0

    rng = random.Random(seed)
    start = time.monotonic()
    callers = [threading.Thread(target=chaos.caller, args=(rng.random(),), name=f"caller-{i}")
               for i in range(CALLERS)]
    kill_thread = threading.Thread(target=chaos.killer, args=(rng.random(),), name="killer")
    for t in callers:
        t.start()
    kill_thread.start()
    kill_thread.join(KILL_FOR_S + scaled(90))
    killer_stuck = kill_thread.is_alive()
    try:
        chaos.calls.wait(MIN_CALLS, timeout=EXTRA_S)
    except TimeoutError:
        pass  # the test asserts on the count, with all the figures
    chaos.stop_calling.set()
    for t in callers:
        t.join(chaos.hang_s + scaled(10))
    stuck = [t.name for t in callers if t.is_alive()] + (["killer"] if killer_stuck else [])
    duration = time.monotonic() - start
    calls = chaos.calls.items

    # Stops of the dead proc meshes must all complete.
    stop_failures, stop_s = [], []
    for g in chaos.all_gens:
        if g.stop_fut is None or g.stop_started is None:
            continue
        try:
            g.stop_fut.get(timeout=scaled(30))
            stop_s.append((g.stop_done or time.monotonic()) - g.stop_started)
        except BaseException as exc:  # noqa: BLE001
            stop_failures.append(f"{g.name}: {type(exc).__name__}: {exc}"[:300])

    # Judge every call.
    by_outcome = collections.Counter(c.outcome for c in calls)
    bad: dict[str, list[str | None]] = collections.defaultdict(list)
    latencies = []  # kill -> end of each call that targeted a killed worker and ended after the kill
    for c in calls:
        k = c.gen.killed_at
        if c.outcome in ("hang", "other", "wrong"):
            bad[c.outcome].append(c.detail)
        elif c.outcome == "supervision":
            if k is None:
                bad["error_on_live_worker"].append(f"{c.gen.name}: {c.detail}")
            elif c.resolved is not None and c.resolved < k:
                bad["error_before_kill"].append(f"{c.gen.name}: {c.detail}")
        if k is not None and c.resolved is not None and c.resolved >= k:
            latencies.append(c.resolved - k)
            if c.outcome == "supervision" and c.resolved - k > kill_to_error_s:
                bad["late_error"].append(f"{c.gen.name}: {c.resolved - k:.3f} s after the kill")
    err_latencies = [c.resolved - c.gen.killed_at for c in calls
                     if c.outcome == "supervision" and c.gen.killed_at is not None and c.resolved is not None
                     and c.resolved >= c.gen.killed_at]

    # Calls already in flight when their worker was killed (the others were issued to a stale
    # worker just after the kill, before the killer swapped the slot; most fail fast).
    in_flight = [c.resolved - c.gen.killed_at for c in calls
                 if c.outcome == "supervision" and c.gen.killed_at is not None and c.resolved is not None
                 and c.issued < c.gen.killed_at]
    after_stop = sum(1 for c in calls if c.gen.stop_started is not None and c.issued >= c.gen.stop_started)

    killed = {g.name: g for g in chaos.all_gens if g.killed_at is not None}
    hooked_now = chaos.hooked.items
    hook_names = collections.Counter(name for _, name, _ in hooked_now)
    hook_unknown = sorted(n for n in hook_names if n not in killed)
    hook_dupes = sorted(n for n, k in hook_names.items() if k > 1)
    hook_lat = [t - (killed[n].killed_at or t) for t, n, _ in hooked_now if n in killed]

    # Shut down; afterwards no process this client started may be left.
    me = psutil.Process()
    before = me.children(recursive=True)
    t_shut = time.monotonic()
    shutdown_context().get(timeout=scaled(60))
    _gone, alive = psutil.wait_procs(before + me.children(recursive=True), timeout=scaled(15))
    alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    shutdown_s = time.monotonic() - t_shut

    figures = {
        "seed": seed,
        "setup_s": _r(setup_s),
        "duration_s": _r(duration),
        "calls": len(calls),
        "ok": by_outcome["ok"],
        "supervision_errors": by_outcome["supervision"],
        "issued_tokens": next(chaos.tokens),
        "kills": len(chaos.kills),
        "generations": len(chaos.all_gens),
        "median_spawn_s": _r(statistics.median(chaos.spawn_s)) if chaos.spawn_s else None,
        "worst_spawn_s": _r(max(chaos.spawn_s, default=None)),
        "worst_kill_to_error_s": _r(max(err_latencies, default=None)),
        "median_kill_to_error_s": _r(statistics.median(err_latencies)) if err_latencies else None,
        "worst_kill_to_end_s": _r(max(latencies, default=None)),
        "in_flight_errors": len(in_flight),
        "worst_in_flight_kill_to_error_s": _r(max(in_flight, default=None)),
        "calls_issued_after_stop": after_stop,
        "hook_failures": len(hooked_now),
        "killed_with_hook_failure": sum(1 for n in killed if n in hook_names),
        "worst_kill_to_hook_s": _r(max(hook_lat, default=None)),
        "hook_unknown": hook_unknown,
        "hook_dupes": hook_dupes,
        "stops": len(stop_s) + len(stop_failures),
        "worst_stop_s": _r(max(stop_s, default=None)),
        "stop_failures": stop_failures,
        "stuck_threads": stuck,
        "thread_errors": chaos.thread_errors,
        "bad": {k: (len(v), v[:5]) for k, v in bad.items()},
        "shutdown_s": _r(shutdown_s),
        "left_after_shutdown": [f"{p.pid} {p.name()}" for p in alive],
    }
    print("CHAOS_FIGURES " + json.dumps(figures), flush=True)


if __name__ == "__main__":
    main(float(sys.argv[1]))
