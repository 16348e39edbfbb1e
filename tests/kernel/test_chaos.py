"""Chaos: procs serving a stream of calls are SIGKILLed and replaced; nothing hangs or leaks.

8 slots each hold a one-proc mesh with one ``ChaosWorker``. Caller threads keep issuing
``work`` calls (a 0-50 ms pause) to the current worker of random slots, a few in flight
each, while a killer thread SIGKILLs a random slot's proc about every 0.5 s, spawns a
replacement, swaps it in and stops the dead proc mesh. Every call must end, with its
value or a ``SupervisionError``, and one that targeted a killed worker must end no later
than 5 s after the kill. The scenario runs in a fresh interpreter so that its fault hook
and runtime are private; it prints its figures as one JSON line.
"""

from __future__ import annotations

import json
import os
import time

import pytest

pytestmark = [pytest.mark.isolated, pytest.mark.slow, pytest.mark.timeout(120)]

#: A call that ended with SupervisionError must have ended this soon after its worker's kill.
KILL_TO_ERROR_S = 5.0

SCENARIO = r"""
import collections, itertools, json, os, random, signal, statistics, threading, time

import psutil

import tetrarch
from tetrarch import SupervisionError, shutdown_context, this_host
from chaos_actors import ChaosWorker

SLOTS = 8             # one-proc meshes serving calls
CALLERS = 6           # threads issuing calls
WINDOW = 4            # calls each caller keeps in flight
KILL_EVERY_S = 0.5    # pace of the killer
KILL_FOR_S = 13.0     # how long the killer runs (about 25 kills)
MIN_CALLS = 1000      # callers go on (up to EXTRA_S more) until this many calls were made
EXTRA_S = 20.0
HANG_S = 15.0         # a call not done this long after it was issued is a hang
SEED = int(os.environ.get("CHAOS_SEED", "0")) or random.SystemRandom().randrange(1, 2**31)

hooked = []  # (monotonic time, mesh name, cause) per failure that reached the fault hook
hook_lock = threading.Lock()


def hook(failure):
    with hook_lock:
        hooked.append((time.monotonic(), failure.mesh_name, failure.cause))


tetrarch.unhandled_fault_hook = hook


class Gen:
    # One generation of a slot: a one-proc mesh, its worker, and when it was killed.
    __slots__ = ("name", "procs", "mesh", "pid", "killed_at", "stop_fut", "stop_started", "stop_done")

    def __init__(self, name, procs, mesh, pid):
        self.name, self.procs, self.mesh, self.pid = name, procs, mesh, pid
        self.killed_at = self.stop_fut = self.stop_started = self.stop_done = None


def spawn(slot, n):
    name = f"s{slot}g{n}"
    procs = this_host().spawn_procs(per_host={"procs": 1}, name=name)
    mesh = procs.spawn(name, ChaosWorker)
    return Gen(name, procs, mesh, mesh.pid.call_one().get(timeout=30))


class Call:
    __slots__ = ("gen", "token", "issued", "resolved", "outcome", "detail")

    def __init__(self, gen, token):
        self.gen, self.token, self.issued = gen, token, time.monotonic()
        self.resolved = self.outcome = self.detail = None

    def done(self, _fut=None):
        if self.resolved is None:
            self.resolved = time.monotonic()


t0 = time.monotonic()
all_gens = []
slots = []
for i in range(SLOTS):
    slots.append(spawn(i, 0))
all_gens.extend(slots)
setup_s = time.monotonic() - t0

calls = []              # every Call, appended when settled
calls_lock = threading.Lock()
tokens = itertools.count()
stop_calling = threading.Event()
thread_errors = []


def settle(rec, fut):
    left = max(0.0, rec.issued + HANG_S - time.monotonic())
    try:
        value = fut.get(timeout=left)
    except TimeoutError:
        rec.outcome, rec.detail = "hang", f"{rec.gen.name} token {rec.token} not done after {HANG_S} s"
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
    with calls_lock:
        calls.append(rec)


def caller(seed):
    rng = random.Random(seed)
    pending = collections.deque()
    try:
        while not stop_calling.is_set():
            gen = slots[rng.randrange(SLOTS)]
            rec = Call(gen, next(tokens))
            try:
                fut = gen.mesh.work.call_one(rec.token, rng.uniform(0.0, 0.05))
            except SupervisionError as exc:  # the worker is already known dead: fails fast
                rec.done()
                rec.outcome, rec.detail = "supervision", str(exc)[:300]
                with calls_lock:
                    calls.append(rec)
                continue
            fut.add_done_callback(rec.done)
            pending.append((rec, fut))
            if len(pending) >= WINDOW:
                settle(*pending.popleft())
        while pending:
            settle(*pending.popleft())
    except BaseException as exc:  # noqa: BLE001
        thread_errors.append(f"caller: {type(exc).__name__}: {exc}")


kills = []
spawn_s = []


def killer(seed):
    rng = random.Random(seed)
    pace = threading.Event()  # never set: wait() only paces the kills
    counters = [1] * SLOTS
    next_kill = time.monotonic() + KILL_EVERY_S
    end = time.monotonic() + KILL_FOR_S
    try:
        while time.monotonic() < end:
            pace.wait(max(0.0, next_kill - time.monotonic()))
            next_kill = time.monotonic() + KILL_EVERY_S
            slot = rng.randrange(SLOTS)
            old = slots[slot]
            old.killed_at = time.monotonic()
            os.kill(old.pid, signal.SIGKILL)
            kills.append(old.name)
            s = time.monotonic()
            new = spawn(slot, counters[slot])
            spawn_s.append(time.monotonic() - s)
            counters[slot] += 1
            all_gens.append(new)
            slots[slot] = new
            old.stop_started = time.monotonic()
            old.stop_fut = old.procs.stop()  # stopping a mesh whose proc is dead must work
            old.stop_fut.add_done_callback(lambda _f, g=old: setattr(g, "stop_done", time.monotonic()))
    except BaseException as exc:  # noqa: BLE001
        thread_errors.append(f"killer: {type(exc).__name__}: {exc}")


rng = random.Random(SEED)
start = time.monotonic()
callers = [threading.Thread(target=caller, args=(rng.random(),), name=f"caller-{i}") for i in range(CALLERS)]
kill_thread = threading.Thread(target=killer, args=(rng.random(),), name="killer")
for t in callers:
    t.start()
kill_thread.start()
kill_thread.join(KILL_FOR_S + 60)
killer_stuck = kill_thread.is_alive()
deadline = time.monotonic() + EXTRA_S
while len(calls) < MIN_CALLS and time.monotonic() < deadline:
    stop_calling.wait(0.1)  # paces the look at the call count; not synchronization
stop_calling.set()
for t in callers:
    t.join(HANG_S + 10)
stuck = [t.name for t in callers if t.is_alive()] + (["killer"] if killer_stuck else [])
duration = time.monotonic() - start

# Stops of the dead proc meshes must all complete.
stop_failures, stop_s = [], []
for g in all_gens:
    if g.stop_fut is None:
        continue
    try:
        g.stop_fut.get(timeout=30)
        stop_s.append((g.stop_done or time.monotonic()) - g.stop_started)
    except BaseException as exc:  # noqa: BLE001
        stop_failures.append(f"{g.name}: {type(exc).__name__}: {exc}"[:300])

# Judge every call.
by_outcome = collections.Counter(c.outcome for c in calls)
bad = collections.defaultdict(list)
latencies = []  # kill -> end of each call that targeted a killed worker and ended after the kill
for c in calls:
    k = c.gen.killed_at
    if c.outcome in ("hang", "other", "wrong"):
        bad[c.outcome].append(c.detail)
    elif c.outcome == "supervision":
        if k is None:
            bad["error_on_live_worker"].append(f"{c.gen.name}: {c.detail}")
        elif c.resolved < k:
            bad["error_before_kill"].append(f"{c.gen.name}: {c.detail}")
    if k is not None and c.resolved is not None and c.resolved >= k:
        latencies.append(c.resolved - k)
        if c.outcome == "supervision" and c.resolved - k > __LIMIT__:
            bad["late_error"].append(f"{c.gen.name}: {c.resolved - k:.3f} s after the kill")
err_latencies = [c.resolved - c.gen.killed_at for c in calls
                 if c.outcome == "supervision" and c.gen.killed_at is not None and c.resolved >= c.gen.killed_at]

# Calls already in flight when their worker was killed (the others were issued to a stale
# worker just after the kill, before the killer swapped the slot; most fail fast).
in_flight = [c.resolved - c.gen.killed_at for c in calls
             if c.outcome == "supervision" and c.gen.killed_at is not None and c.issued < c.gen.killed_at]
after_stop = sum(1 for c in calls if c.gen.stop_started is not None and c.issued >= c.gen.stop_started)

killed = {g.name: g for g in all_gens if g.killed_at is not None}
with hook_lock:
    hooked_now = list(hooked)
hook_names = collections.Counter(name for _, name, _ in hooked_now)
hook_unknown = sorted(n for n in hook_names if n not in killed)
hook_dupes = sorted(n for n, k in hook_names.items() if k > 1)
hook_lat = [t - killed[n].killed_at for t, n, _ in hooked_now if n in killed]

# Shut down; afterwards no process this client started may be left.
me = psutil.Process()
before = me.children(recursive=True)
t_shut = time.monotonic()
shutdown_context().get(timeout=60)
gone, alive = psutil.wait_procs(before + me.children(recursive=True), timeout=15)
alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
shutdown_s = time.monotonic() - t_shut


def r(x):
    return None if x is None else round(x, 3)


figures = {
    "seed": SEED,
    "setup_s": r(setup_s),
    "duration_s": r(duration),
    "calls": len(calls),
    "ok": by_outcome["ok"],
    "supervision_errors": by_outcome["supervision"],
    "issued_tokens": next(tokens),
    "kills": len(kills),
    "generations": len(all_gens),
    "median_spawn_s": r(statistics.median(spawn_s)) if spawn_s else None,
    "worst_spawn_s": r(max(spawn_s, default=None)),
    "worst_kill_to_error_s": r(max(err_latencies, default=None)),
    "median_kill_to_error_s": r(statistics.median(err_latencies)) if err_latencies else None,
    "worst_kill_to_end_s": r(max(latencies, default=None)),
    "in_flight_errors": len(in_flight),
    "worst_in_flight_kill_to_error_s": r(max(in_flight, default=None)),
    "calls_issued_after_stop": after_stop,
    "hook_failures": len(hooked_now),
    "killed_with_hook_failure": sum(1 for n in killed if n in hook_names),
    "worst_kill_to_hook_s": r(max(hook_lat, default=None)),
    "hook_unknown": hook_unknown,
    "hook_dupes": hook_dupes,
    "stops": len(stop_s) + len(stop_failures),
    "worst_stop_s": r(max(stop_s, default=None)),
    "stop_failures": stop_failures,
    "stuck_threads": stuck,
    "thread_errors": thread_errors,
    "bad": {k: (len(v), v[:5]) for k, v in bad.items()},
    "shutdown_s": r(shutdown_s),
    "left_after_shutdown": [f"{p.pid} {p.name()}" for p in alive],
}
print("CHAOS_FIGURES " + json.dumps(figures), flush=True)
""".replace("__LIMIT__", repr(KILL_TO_ERROR_S))


def test_chaos_kills_during_call_stream_resolve_every_call(run_isolated):
    started = time.monotonic()
    res = run_isolated(SCENARIO, timeout=110, env={"PYTHONPATH": os.path.dirname(__file__)})
    wall = time.monotonic() - started
    line = next((ln for ln in res.stdout.splitlines() if ln.startswith("CHAOS_FIGURES ")), None)
    assert res.returncode == 0 and line is not None, (
        f"scenario exited {res.returncode}\n--- stdout ---\n{res.stdout[-4000:]}\n--- stderr ---\n{res.stderr[-4000:]}")
    f = json.loads(line.split(" ", 1)[1])
    print(f"\nchaos (wall {wall:.1f} s): calls={f['calls']} ok={f['ok']} supervision_errors={f['supervision_errors']} "
          f"kills={f['kills']} kill->error worst={f['worst_kill_to_error_s']} s "
          f"median={f['median_kill_to_error_s']} s; hook failures={f['hook_failures']} "
          f"(killed workers reported: {f['killed_with_hook_failure']}/{f['kills']}); "
          f"duration={f['duration_s']} s, setup={f['setup_s']} s, shutdown={f['shutdown_s']} s, "
          f"worst stop of a dead mesh={f['worst_stop_s']} s, seed={f['seed']}")
    print("chaos figures:", json.dumps(f))
    context = f"figures: {json.dumps(f, indent=1)}\n--- stderr ---\n{res.stderr[-3000:]}"

    assert not f["stuck_threads"] and not f["thread_errors"], context
    assert not f["bad"], context  # hangs, wrong values, other errors, errors on live or not-yet-killed workers, late errors
    assert f["calls"] == f["issued_tokens"] and f["calls"] == f["ok"] + f["supervision_errors"], context
    assert f["calls"] >= 1000 and f["kills"] >= 20, context
    assert f["supervision_errors"] > 0, context  # the kills did hit calls in flight
    assert f["worst_kill_to_error_s"] <= KILL_TO_ERROR_S, context
    assert not f["stop_failures"] and f["stops"] == f["kills"], context
    # The fault hook hears of killed workers only, once each; at least most of them.
    assert not f["hook_unknown"] and not f["hook_dupes"], context
    assert f["killed_with_hook_failure"] >= f["kills"] // 2, context
    assert not f["left_after_shutdown"], context
