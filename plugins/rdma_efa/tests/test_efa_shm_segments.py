"""No 16 MiB ``/dev/shm`` segment of libfabric's ``shm`` provider outlives an interrupted or
killed client (issue 28, item 9): each process that opens an ``shm`` endpoint leaves a janitor
behind it that removes the process's segments once it has ended, whatever ended it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest

from tetrarch.testing import scaled

from .conftest import need_provider

pytestmark = pytest.mark.timeout(scaled(180))

CLIENT = textwrap.dedent("""
    import json, os, sys
    from tetrarch import configure, this_host
    from tetrarch.testing.rdma import Holder

    configure(efa_provider="shm")
    mesh = this_host().spawn_procs(per_host={"gpus": 1})
    holder = mesh.spawn("segments", Holder)
    buf = holder.make.call_one("k", 1 << 20, 1, "efa").get(timeout=60)
    buf.read_into(bytearray(1 << 20), timeout=60).get(timeout=60)  # this process's endpoint opens too
    print(json.dumps({"client": os.getpid(), "proc": holder.pid.call_one().get(timeout=30)}), flush=True)
    sys.stdin.read()  # until the test ends it
""")


def _segments(pids: set[int]) -> list[str]:
    return [n for n in os.listdir("/dev/shm") if (m := re.fullmatch(r"(\d+):\d+:\d+", n)) and int(m[1]) in pids]


@pytest.mark.parametrize("how", ["SIGKILL", "Ctrl-C"])
def test_an_ended_client_leaves_no_shm_segment(how: str) -> None:
    need_provider("shm")
    client = subprocess.Popen([sys.executable, "-c", CLIENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, start_new_session=True,
                              env={**os.environ, "TETRARCH_EFA_ALLOW_UNCHECKED_ACCESS": "1"})
    tree: list[psutil.Process] = []
    try:
        assert client.stdout is not None
        line = client.stdout.readline()
        assert line, f"the client ended before its transfer (exit {client.wait(timeout=scaled(30))})"
        pids = set(json.loads(line).values())
        assert _segments(pids), "the shm endpoints made no segment: nothing to check"
        tree = psutil.Process(client.pid).children(recursive=True)  # host agent, proc, janitors
        if how == "SIGKILL":
            client.kill()
        else:
            os.killpg(client.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
        client.wait(timeout=scaled(60))
        _, alive = psutil.wait_procs(tree, timeout=scaled(60))
        assert not alive, f"processes outlived the client: {alive}"
        assert not _segments(pids), f"shm segments outlived their processes: {_segments(pids)}"
    finally:
        for proc in [*tree, psutil.Process(client.pid)] if client.poll() is None else tree:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        client.wait(timeout=scaled(30))
