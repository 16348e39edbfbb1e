"""Procs start as forks of their host's template process (the zygote): the proc a fresh
interpreter would be, with its modules already imported.

The whole suite runs its procs this way (it is the default); these tests pin down what
forking must not change, the switch back to fresh interpreters, ``preload``, and what
happens when the zygote cannot fork any more.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import psutil
import pytest

import tetrarch
from tetrarch import ProcMesh, this_host
from tetrarch.testing import scaled
from zygote_actors import Probe

pytestmark = pytest.mark.timeout(scaled(120))

HERE = os.path.dirname(__file__)


@pytest.fixture
def spawn() -> Iterator:
    made: list[ProcMesh] = []

    def go(n: int, **kwargs: object) -> list[dict]:
        pm = this_host().spawn_procs(per_host={"procs": n}, **kwargs)  # type: ignore[arg-type]
        made.append(pm)
        modules = ["zygote_preloaded", "numpy"]
        return list(pm.spawn("probe", Probe).facts.call(modules).get(timeout=scaled(30)).values())

    yield go
    for pm in made:
        pm.stop().get(timeout=scaled(30))


def test_procs_are_forked_by_one_zygote_per_host_and_look_fresh(spawn) -> None:
    facts = spawn(3)
    zygote = {f["ppid"] for f in facts}
    assert len(zygote) == 1, f"one template process per host forks every proc: {facts}"
    zpid = zygote.pop()
    agent = psutil.Process(zpid).ppid()
    assert psutil.Process(agent).ppid() == os.getpid(), "the zygote is the host agent's child"
    assert "tetrarch zygote" in " ".join(psutil.Process(zpid).cmdline())
    assert sorted(f["rank"] for f in facts) == ["0", "1", "2"]
    for f in facts:
        assert f["secret_vars"] == [], "the secret never sits in a proc's environment"
        assert f["argv0"].endswith("_proc_main.py")
        assert "tetrarch proc" in f["cmdline"]
        assert f["pgid"] == f["pid"], "each proc leads its own process group, as a fresh one does"
        assert f["stdin"] == "/dev/null"
        # what it inherited is out of the collector's reach: a full collection does not copy those pages
        assert f["frozen"] > 1000
    assert len({f["random"] for f in facts}) == 3, "random is reseeded in every proc"


@pytest.mark.isolated  # a client started with metrics or span export on
@pytest.mark.parametrize(("env", "modules"), [
    ({"TETRARCH_METRICS": "1", "OTEL_METRIC_EXPORT_INTERVAL": "600000"},  # no export while it runs
     ["opentelemetry.sdk.metrics", "opentelemetry.exporter.otlp.proto.http.metric_exporter", "requests"]),
    ({"TETRARCH_TRACE_EXPORT": "otlp"},
     ["opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter", "requests"]),
], ids=["metrics", "spans"])
def test_procs_that_export_telemetry_inherit_the_exporter_from_the_zygote(run_isolated, env, modules) -> None:
    """With metrics or span export on, every proc starts OpenTelemetry's OTLP exporter: imported after each
    fork, that was about 240 ms of CPU per proc (16 procs took 2.2 s to start instead of 0.4 s). Span export
    used to start in the host agent at import, before its zygote's fork: its thread made forking unsafe, and
    every proc started as a fresh interpreter."""
    res = run_isolated(
        f"""
        import json, os, sys
        sys.path.insert(0, os.environ["ZYGOTE_TESTS"])
        from tetrarch import this_host
        from zygote_actors import Probe
        pm = this_host().spawn_procs(per_host={{"procs": 2}})
        print(json.dumps(list(pm.spawn("probe", Probe).inherited.call({modules!r}).get(timeout=60).values())))
        pm.stop().get(timeout=60)
        """,
        timeout=120,
        env={"ZYGOTE_TESTS": HERE, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", **env},
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.strip().splitlines()[-1]) == [dict.fromkeys(modules, True)] * 2


def test_fresh_interpreters_on_request(spawn) -> None:
    with tetrarch.configured(fork_procs=False):
        facts = spawn(2)
    for f in facts:
        assert psutil.Process(f["ppid"]).ppid() == os.getpid(), "the host agent itself started the proc"
        assert "tetrarch zygote" not in " ".join(psutil.Process(f["ppid"]).cmdline())


def test_preload_is_imported_once_by_the_zygote(spawn) -> None:
    facts = spawn(2, preload=["zygote_preloaded", "numpy"])
    for f in facts:
        assert f["imported_in"]["zygote_preloaded"] == f["ppid"], "imported in the zygote, before the fork"
    assert len({f["np_random"] for f in facts}) == 2, "numpy's global generator is reseeded after the fork"


def test_preload_in_a_fresh_interpreter_is_imported_at_start(spawn) -> None:
    with tetrarch.configured(fork_procs=False):
        facts = spawn(1, preload=["zygote_preloaded"])
    assert facts[0]["imported_in"]["zygote_preloaded"] == facts[0]["pid"]


@pytest.mark.parametrize("preload", ["torch", ["no such module"], [""], [3]])
def test_bad_preload_is_refused_with_an_example(preload) -> None:
    with pytest.raises(TypeError, match=r"preload=\["):
        this_host().spawn_procs(per_host={"procs": 1}, preload=preload)


@pytest.mark.isolated
def test_a_preload_that_starts_a_thread_ends_forking_on_that_host(run_scenario) -> None:
    res = run_scenario(os.path.join(HERE, "scenarios", "zygote_fallback.py"), "threads", timeout=120)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["first_parents"] == [out["zygote"]]
    assert out["second_parents"] == [out["agent"]], "after the thread, procs start as fresh interpreters"
    assert out["second_imported_in"] == [True, True], "and import the preload themselves"
    assert out["first_after"] == out["first_pids"], "the procs forked before live on"
    assert "fresh interpreters from now on" in res.stderr and "zygote_threads" in res.stderr


@pytest.mark.isolated
def test_a_killed_zygote_takes_its_procs_and_later_procs_start_fresh(run_scenario) -> None:
    res = run_scenario(os.path.join(HERE, "scenarios", "zygote_fallback.py"), "kill", timeout=120)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["first_alive"] == [], "the procs died with their zygote"
    assert str(out["first_after"]).startswith("SupervisionError"), out
    assert "SIGKILL" in out["first_after"], out
    assert out["second_parents"] == [out["agent"]]


@pytest.mark.isolated
def test_a_preload_that_kills_the_zygote_fails_the_spawn_with_its_exit(run_isolated) -> None:
    """The zygote dies importing it; the procs start as fresh interpreters, die the same way, and say so."""
    res = run_isolated(
        """
        import os, sys
        sys.path.insert(0, os.environ["ZYGOTE_TESTS"])
        from tetrarch import ProcessStartError, this_host
        try:
            this_host().spawn_procs(per_host={"procs": 1}, preload=["zygote_exits"])
        except ProcessStartError as err:
            print("RC", err.returncode)
            print(err)
        """,
        timeout=60,
        env={"ZYGOTE_TESTS": HERE},
    )
    assert res.returncode == 0, res.stderr
    assert "RC 7" in res.stdout and "simulated broken import" in res.stdout, res.stdout + res.stderr
