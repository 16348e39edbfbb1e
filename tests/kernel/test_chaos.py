"""Chaos: procs serving a stream of calls are SIGKILLed and replaced; nothing hangs or leaks.

8 slots each hold a one-proc mesh with one ``ChaosWorker``. Caller threads keep issuing
``work`` calls (a 0-50 ms pause) to the current worker of random slots, a few in flight
each, while a killer thread SIGKILLs a random slot's proc about every 0.5 s, spawns a
replacement, swaps it in and stops the dead proc mesh. Every call must end, with its
value or a ``SupervisionError``, and one that targeted a killed worker must end no later
than 5 s (scaled) after the kill. The scenario (``scenarios/chaos.py``) runs in a fresh
interpreter so that its fault hook and runtime are private; it prints its figures as one
JSON line.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tetrarch.testing import scaled

pytestmark = [pytest.mark.isolated, pytest.mark.slow, pytest.mark.timeout(scaled(120))]

HERE = Path(__file__).resolve().parent

#: A call that ended with SupervisionError must have ended this soon (nominal seconds,
#: scaled) after its worker's kill.
KILL_TO_ERROR_S = 5.0


def test_chaos_kills_during_call_stream_resolve_every_call(run_scenario):
    kill_to_error_s = scaled(KILL_TO_ERROR_S)
    started = time.monotonic()
    res = run_scenario(HERE / "scenarios" / "chaos.py", str(kill_to_error_s), timeout=110, pythonpath=[HERE])
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
    # hangs, wrong values, other errors, errors on live or not-yet-killed workers, late errors
    assert not f["bad"], context
    assert f["calls"] == f["issued_tokens"] and f["calls"] == f["ok"] + f["supervision_errors"], context
    assert f["calls"] >= 1000 and f["kills"] >= 20, context
    assert f["supervision_errors"] > 0, context  # the kills did hit calls in flight
    assert f["worst_kill_to_error_s"] <= kill_to_error_s, context
    assert not f["stop_failures"] and f["stops"] == f["kills"], context
    # The fault hook hears of killed workers only, once each; at least most of them.
    assert not f["hook_unknown"] and not f["hook_dupes"], context
    assert f["killed_with_hook_failure"] >= f["kills"] // 2, context
    assert not f["left_after_shutdown"], context
