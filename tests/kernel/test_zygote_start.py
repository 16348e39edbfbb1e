"""What the zygote does for a proc's start, piece by piece: its environment made exactly the
proc's, and what the host agent loads once before forking it (the registry, the transport's
module, the host key) inherited instead of loaded again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from tetrarch._plugins import BackendKind, get_registry
from tetrarch._runtime.plumbing import _segments
from tetrarch._runtime.programs import _zygote
from tetrarch.testing import scaled

pytestmark = [pytest.mark.transport_independent,  # no message crosses a transport here
              pytest.mark.timeout(scaled(60))]


def test_replace_environ_makes_it_exactly_the_procs() -> None:
    saved = dict(os.environ)
    wanted = {k: v for k, v in saved.items() if not k.startswith("TETRARCH_")}
    wanted.update({"ZYGOTE_NEW": "1", "PATH": saved.get("PATH", "") + os.pathsep + "/nowhere"})
    os.environ["ZYGOTE_GONE"] = "x"
    try:
        _zygote._replace_environ(wanted)
        assert dict(os.environ) == wanted
        # what a child process inherits is the C environment: it must match too
        shown = subprocess.run([sys.executable, "-c", "import os, json; print(json.dumps(dict(os.environ)))"],
                               capture_output=True, text=True, check=True, env=None).stdout
        inherited = json.loads(shown)
        assert inherited.get("ZYGOTE_NEW") == "1" and "ZYGOTE_GONE" not in inherited
        assert inherited["PATH"] == wanted["PATH"]
    finally:
        _zygote._replace_environ(saved)
    assert dict(os.environ) == saved


def test_warm_for_procs_loads_what_procs_need() -> None:
    why = _zygote.warm_for_procs()
    assert why == "" or why.startswith("after loading the plugin registry, Python threads run")  # this test's process
    key = _segments._key
    assert key is not None  # cached, and a forked proc inherits it:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child only reads the module's state and leaves
        os.write(w, repr(_segments._key).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        inherited = f.read().decode()
    os.waitpid(pid, 0)
    assert inherited == repr(key)
    spec = get_registry().select(BackendKind.TRANSPORT)
    module = spec.factory.partition(":")[0]
    if module.startswith("tetrarch."):
        assert module in sys.modules


@pytest.mark.isolated  # a fresh client, with a large environment its procs inherit
def test_requests_larger_than_the_window_are_all_forked(
        run_isolated: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    """Each fork request here is about half of ``WINDOW``: few wait unanswered at once, and all are forked."""
    res = run_isolated(
        """
        import json, os
        import psutil
        from tetrarch import Actor, endpoint, this_host

        class Env(Actor):
            @endpoint
            def facts(self):
                parent = " ".join(psutil.Process(os.getppid()).cmdline())
                return parent, len(os.environ.get("ZYGOTE_BIG", ""))

        pm = this_host().spawn_procs(per_host={"procs": 6})
        facts = list(pm.spawn("env", Env).facts.call().get(timeout=60).values())
        print(json.dumps({"parents": sorted({p for p, _ in facts}), "big": [n for _, n in facts]}))
        pm.stop().get(timeout=60)
        """,
        timeout=120,
        env={"ZYGOTE_BIG": "x" * (_zygote.WINDOW // 2)},
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert len(out["parents"]) == 1 and out["parents"][0].startswith("tetrarch zygote"), f"one zygote forked all: {out}"
    assert out["big"] == [_zygote.WINDOW // 2] * 6
