"""A client of workers (``run_worker_loop_forever``), run by tests/kernel/test_workers.py.

    attach_client.py call SECRET ADDR...    attach, spawn 2 procs per worker, call them, shut down; JSON
    attach_client.py hold SECRET ADDR...    attach, spawn, print the procs' pids, then wait for stdin to close
    attach_client.py job SECRET CACHE ADDR...  WorkerJob({"w": ADDR...}).state(cached_path=CACHE); JSON
    attach_client.py twice SECRET ADDR...   attach twice (the second is refused), shut down, attach again
                                            (the addresses as futures); JSON
    attach_client.py mixed SECRET ADDR...   this_host() procs first, then attach; actors on both call each
                                            other (references passed as arguments); JSON
    attach_client.py badtag SECRET ADDR     send one worker/attach whose sealed secret has a bad tag; JSON

The last line of stdout is JSON: ``{"error": ..., "message": ..., "seconds": ...}`` on failure.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from job_actors import Where
from tetrarch import Future, attach_to_workers, this_host
from tetrarch.job import WorkerJob
from worker_actors import Peer


def _pids(mesh) -> dict:
    procs = mesh.spawn_procs(per_host={"gpus": 2}, name="attached")
    where = procs.spawn("where", Where)
    return procs, {str(dict(point)): pids for point, pids in where.pids.call().get().items()}


def _mixed(secret: str, addresses: list[str]) -> dict:
    """this_host() procs first (the runtime runs with its own secret), then the workers."""
    local_procs = this_host().spawn_procs(per_host={"gpus": 1}, name="local")
    local = local_procs.spawn("peer", Peer)
    local_pid, local_agent = local.whoami.call_one().get()
    mesh = attach_to_workers(workers=addresses, secret_file=secret, name="w")
    procs = mesh.spawn_procs(per_host={"gpus": 1}, name="attached")
    remote = procs.spawn("peer", Peer)
    remote_pids = {str(dict(point)): pids for point, pids in remote.whoami.call().get().items()}
    first = remote.slice(hosts=0, gpus=0)
    last = remote.slice(hosts=len(addresses) - 1, gpus=0)
    out = {"local": [local_pid, local_agent], "remote": remote_pids,
           "remote_asks_local": list(first.ask.call_one(local).get()),
           "local_asks_remote": list(local.ask.call_one(last).get()),
           "remote_asks_remote": list(last.ask.call_one(first).get())}
    procs.stop().get()
    mesh.shutdown().get()
    local_procs.stop().get()
    return out


def _bad_tag(secret: str, address: str) -> dict:
    """One worker/attach, keyed with the right secret, whose sealed session secret carries a bad tag."""
    from tetrarch._config import TRANSPORT
    from tetrarch._plugins import get_registry
    from tetrarch._plugins._specs import BackendKind
    from tetrarch._runtime.meshes._worker_auth import fresh_transport, read_secret_file, seal_secret
    from tetrarch._runtime.process._root import get_root
    from tetrarch._runtime.router._router import Router
    from tetrarch._runtime.values import _serial, _wire

    worker_secret = read_secret_file(secret, "test")
    root = get_root()
    # The workers' transport (this runtime may run another), as attach_to_workers selects it.
    transport = fresh_transport(get_registry().select(BackendKind.TRANSPORT, TRANSPORT(), address=address).name)
    helper = Router(transport, worker_secret, name="attach", lead_waiters=False)
    answer: list = []
    done = threading.Event()

    def on_reply(hdr: _wire.PortHeader, payload: list) -> None:
        answer.append((hdr.status, _serial.loads(payload)))
        done.set()

    try:
        nonce, sealed, tag = seal_secret(worker_secret, root.secret)
        forged = bytes([tag[0] ^ 1]) + tag[1:]
        port = helper.open_port(on_reply)
        helper.send(address, [_wire.sys_header(_wire.SVC_WORKER, "attach", helper.address, port),
                              *_serial.dumps(_wire.WorkerAttach(root.router.address, "x/0", nonce, sealed, forged))])
        if not done.wait(30):
            return {"error": "timeout", "message": "no answer"}
    finally:
        helper.close()
        transport.close()
    status, value = answer[0]
    return {"ok": status == _wire.OK, "answer": str(value)}


def main() -> int:
    mode, secret, *rest = sys.argv[1:]
    started = time.monotonic()
    try:
        if mode == "mixed":
            print(json.dumps(_mixed(secret, rest)), flush=True)
            return 0
        if mode == "badtag":
            print(json.dumps(_bad_tag(secret, rest[0])), flush=True)
            return 0
        if mode == "job":
            cache, *addresses = rest
            job = WorkerJob({"w": addresses}, secret_file=secret)
            state = job.state(cached_path=cache)
            procs, pids = _pids(state.w)
            out = {"apply_id": job.apply_id, "pids": pids}
            procs.stop().get()
            print(json.dumps(out), flush=True)
            return 0
        mesh = attach_to_workers(workers=rest, secret_file=secret, name="w")
        mesh.initialized.get()
        if mode == "twice":
            try:
                attach_to_workers(workers=rest, secret_file=secret).initialized.get()
                refused = ""
            except Exception as exc:  # noqa: BLE001 - reported
                refused = str(exc)
            mesh.shutdown().get()
            again = attach_to_workers(workers=[Future._completed(a) for a in rest], secret_file=secret)
            procs, pids = _pids(again)
            print(json.dumps({"refused": refused, "pids": pids}), flush=True)
            return 0
        procs, pids = _pids(mesh)
        if mode == "hold":
            print(json.dumps({"pids": pids}), flush=True)
            sys.stdin.read()  # the test kills us meanwhile
            return 0
        procs.stop().get()
        mesh.shutdown().get()
        print(json.dumps({"pids": pids}), flush=True)
    except Exception as exc:  # noqa: BLE001 - the test reads the JSON
        print(json.dumps({"error": type(exc).__name__, "message": str(exc),
                          "seconds": time.monotonic() - started}), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
