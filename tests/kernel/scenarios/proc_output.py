"""Scenario: procs' output at the client (``python proc_output.py MODE``), run by ``test_output.py``.

MODE ``talk``: 3 procs of the mesh ``trainers`` print, log, warn and write a long line and
an unterminated one; the client stops them at once, then prints ``CLIENT DONE``.
``crash``: rank 1 of 2 segfaults after a print. ``toggle``: ``logging_option`` switches
forwarding off and on. ``aggregate``: 4 procs print the same line within a window.
``plain``: 3 procs write one short line to each stream.
``titles``: prints ``TITLE <cmdline>`` for a proc and its host agent. ``flood N``: 2 procs
print N lines each, and are stopped at once. ``slow_agent``: 2 procs print a line each, their
host agent is stopped (SIGSTOP) for 2 s, and the client stops the procs meanwhile: their
connections drop long before the agent can forward their lines and report their exits.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

import psutil

import tetrarch
from output_actors import Talker
from tetrarch import this_host


def main(mode: str, *args: str) -> None:
    gpus = {"talk": 3, "plain": 3, "crash": 2, "toggle": 1, "aggregate": 4, "titles": 2, "flood": 2,
            "slow_agent": 2}[mode]
    pm = this_host().spawn_procs(per_host={"gpus": gpus}, name="trainers")
    talkers = pm.spawn("talker", Talker)
    if mode == "talk":
        talkers.talk.broadcast()  # no waiting: the stop below runs it first, then ends the procs
    elif mode == "plain":
        talkers.both.call().get()
    elif mode == "flood":
        talkers.flood.broadcast(int(args[0]))
    elif mode == "slow_agent":
        _pid, agent = talkers.slice(gpus=0).pids.call_one().get()
        os.kill(agent, signal.SIGSTOP)
        resume = threading.Timer(2.0, os.kill, (agent, signal.SIGCONT))  # the condition under test
        resume.start()
        talkers.say.broadcast("said before the stop")
    elif mode == "crash":
        tetrarch.unhandled_fault_hook = lambda failure: print("FAULT SEEN", flush=True)
        try:
            talkers.slice(gpus=1).crash.call_one().get()
        except Exception as exc:  # noqa: BLE001 - the crash is expected
            sys.stdout.write(f"CALL FAILED {type(exc).__name__}\n")  # one write: see docs/logging.md
            sys.stdout.flush()
    elif mode == "toggle":
        # The client's own marks between the steps: a failure's stdout shows on which side of the
        # switches each line arrived (the CI failure of stop 43, not reproduced since).
        talkers.say.call_one("forwarded 1").get()
        pm.logging_option(stream_to_client=False).get()
        print("MARK forwarding off", flush=True)
        talkers.say.call_one("unprefixed").get()
        print("MARK said unprefixed", flush=True)
        pm.logging_option(stream_to_client=True).get()
        print("MARK forwarding on", flush=True)
        talkers.say.call_one("forwarded 2").get()
    elif mode == "aggregate":
        pm.logging_option(aggregate_window_sec=600, level=logging.INFO).get()
        talkers.same.call().get()
    elif mode == "titles":
        pid, ppid = talkers.slice(gpus=1).pids.call_one().get()
        print("TITLE", " ".join(psutil.Process(pid).cmdline()))
        print("TITLE", " ".join(psutil.Process(ppid).cmdline()))
    pm.stop().get()
    print("CLIENT DONE", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
