"""``AllocatorConformance``: what a user relies on from any allocator backend.

Subclass it in your plugin's tests and name the allocator under test (the backend's name,
as users choose it: ``AllocatorJob(..., allocator="foo")`` / ``TETRARCH_ALLOCATOR=foo``)::

    import pytest
    from tetrarch.testing.allocator import AllocatorConformance

    class TestFooAllocator(AllocatorConformance):
        @pytest.fixture(scope="class")
        @classmethod
        def allocator(cls) -> str:
            return "foo"

Each test runs a fresh tetrarch client program (``python -m tetrarch.testing._allocator_client``)
that gets hosts from the allocator the way users do, through the registry and
``tetrarch.job.AllocatorJob({"hosts": N}, allocator=..., options=...)``, with core's real
host agents, and reports what happened; the test asserts on it. The contract:

* **hosts start and serve**: the job's host mesh has ``hosts`` hosts; a proc spawned on each
  answers an actor call, each from a host agent of its own, with the job's environment;
* **spans_hosts is honest**: an allocator with the ``same-host`` capability does not span
  hosts and its agents run on this machine; one with ``multi-host`` spans hosts, and its
  ``client_host(options)`` is ``None`` or an address of this machine;
* **teardown leaves nothing**: ``job.kill()`` returns promptly and no process of the
  allocation is left on this machine (each carries a variable of the run), nor anything
  :meth:`AllocatorConformance.left_behind` finds (a Slurm job, a container...);
* **a SIGKILLed agent is reported, not hung**: a call pending on its host fails with
  ``SupervisionError`` within 5 s, the other hosts still answer, a new ``spawn_procs`` on
  the mesh raises ``SupervisionError`` naming the host agent, teardown still leaves nothing;
* **the client's death ends the allocation**: the client SIGKILLed, its agents and procs end;
* **every agent's exit is reported once**: ``Allocator.allocate(request, on_exit)`` with
  agents that exit by themselves (core's host agent given a client address nobody listens
  on) calls ``on_exit(index, info)`` once per index, with a failed ``ExitInfo``, and
  ``Allocation.stop()`` returns promptly, twice;
* **bad options are refused, naming the fix**: each of :meth:`bad_options` makes
  ``AllocatorJob(...).apply()`` raise, with a message that matches its pattern, and nothing starts.

Fixtures a subclass may override (class scoped, like ``RdmaSuite``'s):

``allocator``
    The backend's name (required).
``allocator_options``
    ``AllocRequest.options`` for the jobs (default ``{}``).
``client_env``
    Variables for the client program, e.g. ``{"SLURM_CONF": ...}``; an allocator that
    spans hosts needs a transport that does too: ``{"TETRARCH_TRANSPORT": "tcp"}``.
``bad_options``
    ``[(options, pattern), ...]``: options the allocator must refuse, each with a regular
    expression its error message must contain (``re.search``). The default is one unknown
    option, which must be refused by name. Each case's options replace ``allocator_options``.

Class attributes: ``hosts`` (default 2; the survivor check needs 2), ``run_timeout`` (nominal
seconds one client program may take, default 60). Method: ``left_behind(seen, timeout)``,
what the allocation left that is not a process of this machine (default: nothing).

Every test is bounded (pytest-timeout's mark where it is installed, ``scaled()`` bounds on
every wait) and waits on reports, never on sleeps. The process checks look at this machine
only: for agents on other machines, make ``left_behind`` look there.
The kit needs ``pytest`` and ``psutil`` (``tetrarch[test]``).
"""

from __future__ import annotations

import importlib.util
import ipaddress
import re
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from ._allocator_client import RUN_ENV
from ._allocator_run import ClientRun, left_running, new_run
from ._timing import scaled

__all__ = ["AllocatorConformance"]

#: Nominal seconds one expected event may take: an answer, ``job.kill()``, ``Allocation.stop()``.
EVENT_S = 10.0
#: Nominal seconds within which a call pending on a SIGKILLed agent's host must fail.
DEATH_S = 5.0
#: Nominal seconds the processes of an allocation get to end after its teardown or its client's death.
GONE_S = 15.0
#: Nominal seconds :meth:`AllocatorConformance.left_behind` may wait for what it looks for to go.
LEFT_S = 30.0
#: Upper bound of one test (pytest-timeout).
TEST_TIMEOUT_S = 180.0


class AllocatorConformance:
    """The allocator contract (see the module docstring). Subclass it and provide ``allocator``."""

    pytestmark = ([pytest.mark.timeout(scaled(TEST_TIMEOUT_S))]
                  if importlib.util.find_spec("pytest_timeout") is not None else [])

    #: How many hosts each job asks for.
    hosts: int = 2
    #: Nominal seconds one client program may take (start the job, call, tear down).
    run_timeout: float = 60.0

    # -- what a subclass provides ---------------------------------------------
    @pytest.fixture(scope="class")
    @classmethod
    def allocator(cls) -> str:
        raise NotImplementedError(f"{cls.__name__} must define a class-scoped `allocator` fixture "
                                  "returning the allocator backend's name")

    @pytest.fixture(scope="class")
    @classmethod
    def allocator_options(cls) -> Mapping[str, object]:
        return {}

    @pytest.fixture(scope="class")
    @classmethod
    def client_env(cls) -> Mapping[str, str]:
        return {}

    @pytest.fixture(scope="class")
    @classmethod
    def bad_options(cls) -> Sequence[tuple[Mapping[str, object], str]]:
        return [({"not_an_option_of_any_allocator": 1}, "not_an_option_of_any_allocator")]

    def left_behind(self, seen: Sequence[Mapping[str, str]], timeout: float) -> list[str]:
        """What the allocation left behind besides processes of this machine, after waiting up to ``timeout`` s.

        ``seen`` holds the environments of the procs that answered (empty where none
        started): e.g. their ``SLURM_JOB_ID``. Return one line per thing left (an empty
        list: nothing). The default finds nothing.
        """
        return []

    # -- helpers ----------------------------------------------------------------
    @pytest.fixture(scope="class")
    @classmethod
    def client_dir(cls, tmp_path_factory: pytest.TempPathFactory) -> Path:
        """The client program's working directory."""
        return tmp_path_factory.mktemp("allocator-kit")

    @classmethod
    def _config(cls, allocator: str, options: Mapping[str, object], run: str, **more: Any) -> dict[str, Any]:
        return {"allocator": allocator, "options": dict(options), "hosts": cls.hosts, "run": run,
                "bound": scaled(EVENT_S), **more}

    @classmethod
    def _run(cls, check: str, allocator: str, options: Mapping[str, object], client_env: Mapping[str, str],
             client_dir: Path, **more: Any) -> dict[str, Any]:
        run = new_run()
        with ClientRun(check, cls._config(allocator, options, run, **more), client_env, str(client_dir)) as client:
            report = client.finish(cls.run_timeout)
        report["run"] = run
        report["events"] = client.events
        return report

    def _assert_nothing_left(self, report: dict[str, Any]) -> None:
        left = left_running(report["run"], GONE_S)
        assert left == [], f"processes of the allocation still run {scaled(GONE_S):g} s after it ended: {left}"
        seen = [a["env"] for a in report.get("answers", [])]
        behind = self.left_behind(seen, scaled(LEFT_S))
        assert behind == [], f"the allocation left behind: {behind}"

    @pytest.fixture(scope="class")
    @classmethod
    def served(cls, allocator: str, allocator_options: Mapping[str, object], client_env: Mapping[str, str],
               client_dir: Path) -> dict[str, Any]:
        """One job served a call on each host and was killed (the ``serve`` client's report)."""
        return cls._run("serve", allocator, allocator_options, client_env, client_dir)

    # -- tests: hosts start and serve ------------------------------------------
    def test_hosts_start_and_a_proc_on_each_answers(self, served: dict[str, Any]) -> None:
        answers = served["answers"]
        assert served["extent"] == {"hosts": self.hosts}, served["extent"]
        assert [a["rank"] for a in answers] == [{"hosts": h, "procs": 0} for h in range(self.hosts)], answers
        assert len({a["pid"] for a in answers}) == self.hosts
        assert len({(a["hostname"], a["agent"]) for a in answers}) == self.hosts, "one host agent per host"
        assert all(a["env"].get(RUN_ENV) == served["run"] for a in answers), \
            "the job's env (AllocatorJob(env=...)) must reach the host agents and so their procs"
        assert served["answered"] < scaled(EVENT_S), served

    def test_spans_hosts_says_where_the_agents_run(self, served: dict[str, Any]) -> None:
        spans, caps, client_host = served["spans_hosts"], set(served["capabilities"]), served["client_host"]
        assert isinstance(spans, bool), f"Allocator.spans_hosts must be a bool, got {spans!r}"
        if "same-host" in caps:
            assert not spans, "an allocator with the 'same-host' capability runs its agents here: spans_hosts=False"
        if "multi-host" in caps:
            assert spans, "an allocator with the 'multi-host' capability must set Allocator.spans_hosts"
        if not spans:
            here = {socket.gethostname(), served["hostname"]}
            elsewhere = [a for a in served["answers"] if a["hostname"] not in here]
            assert not elsewhere, (f"spans_hosts is False (the client listens on this machine only), but procs "
                                   f"answered from {[a['hostname'] for a in elsewhere]}")
        elif client_host is not None:
            ipaddress.ip_address(client_host)  # client_host(options) is an IP ...
            family = socket.AF_INET6 if ":" in client_host else socket.AF_INET
            with socket.socket(family, socket.SOCK_STREAM) as s:  # ... of this machine
                s.bind((client_host, 0))

    def test_teardown_leaves_nothing_running(self, served: dict[str, Any]) -> None:
        assert served["killed"] < scaled(EVENT_S), f"job.kill() took {served['killed']:.1f} s"
        self._assert_nothing_left(served)

    # -- tests: failures ---------------------------------------------------------
    def test_a_sigkilled_agent_fails_pending_calls_and_is_reported(
            self, allocator: str, allocator_options: Mapping[str, object], client_env: Mapping[str, str],
            client_dir: Path) -> None:
        report = self._run("agent_killed", allocator, allocator_options, client_env, client_dir)
        pending, respawn = report["pending"], report["respawn"]
        assert isinstance(pending, dict), f"a call pending on the host whose agent was SIGKILLed returned {pending!r}"
        assert pending["type"] == "SupervisionError", f"a call pending on the killed agent's host ended with {pending}"
        assert report["pending_s"] < scaled(DEATH_S), f"the pending call failed only after {report['pending_s']:.1f} s"
        if self.hosts > 1:
            assert report["survivor"] == report["answers"][1]["pid"], \
                f"hosts=1 must still answer after hosts=0's agent died: {report['survivor']!r}"
        assert isinstance(respawn, dict), f"spawn_procs on a mesh with a dead host agent gave {respawn!r}"
        assert respawn["type"] == "SupervisionError", f"spawn_procs on a mesh with a dead host agent raised {respawn}"
        assert "host agent" in respawn["message"], f"the error must name the dead host agent: {respawn['message']!r}"
        assert report["respawn_s"] < scaled(DEATH_S)
        assert report["killed"] < scaled(EVENT_S), f"job.kill() took {report['killed']:.1f} s after an agent died"
        self._assert_nothing_left(report)

    def test_killing_the_client_ends_its_allocation(
            self, allocator: str, allocator_options: Mapping[str, object], client_env: Mapping[str, str],
            client_dir: Path) -> None:
        run = new_run()
        config = self._config(allocator, allocator_options, run)
        with ClientRun("hold", config, client_env, str(client_dir)) as client:
            client.wait_for("holding", self.run_timeout)
            report = {**client.report(), "run": run}
            client.kill()
        self._assert_nothing_left(report)

    def test_every_agents_exit_reaches_on_exit_once(
            self, allocator: str, allocator_options: Mapping[str, object], client_env: Mapping[str, str],
            client_dir: Path) -> None:
        report = self._run("exit_reports", allocator, allocator_options, client_env, client_dir)
        assert "timeout" not in report, report["timeout"]
        reports = report["reports"]
        assert sorted(r["index"] for r in reports) == list(range(self.hosts)), \
            f"on_exit must be called once per agent, with its index: {reports}"
        assert report["before_stop"] == self.hosts, "every exit must be reported before Allocation.stop()"
        assert all(r["type"] == "ExitInfo" and r["returncode"] != 0 for r in reports), reports
        assert report["stopped"] < scaled(EVENT_S), f"Allocation.stop() took {report['stopped']:.1f} s"
        self._assert_nothing_left(report)

    def test_bad_options_are_refused_naming_the_fix(
            self, allocator: str, bad_options: Sequence[tuple[Mapping[str, object], str]],
            client_env: Mapping[str, str], client_dir: Path) -> None:
        cases = list(bad_options)
        if not cases:
            pytest.skip("bad_options declares no options to refuse")
        report = self._run("bad_options", allocator, {}, client_env, client_dir,
                           cases=[dict(options) for options, _pattern in cases])
        outcomes = [e for e in report["events"] if "options" in e]
        assert len(outcomes) == len(cases), outcomes
        for (options, pattern), outcome in zip(cases, outcomes, strict=True):
            assert "refused" in outcome, f"options {dict(options)!r} were accepted: a job started"
            message = outcome["refused"]["message"]
            assert re.search(pattern, message), \
                f"refusing {dict(options)!r}, the {outcome['refused']['type']} says {message!r}: no {pattern!r}"
            assert outcome["seconds"] < scaled(EVENT_S), outcome
        self._assert_nothing_left(report)

