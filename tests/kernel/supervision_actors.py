"""Actor classes for the supervision and stop tests (procs import this module by name)."""

from __future__ import annotations

import asyncio
import os
import threading

from tetrarch import Actor, Port, context, endpoint
from tetrarch.testing import scaled


class Fragile(Actor):
    """Fails in every way the error split distinguishes."""

    @endpoint
    def ok(self) -> str:
        return "alive"

    @endpoint
    def raise_exc(self) -> None:
        raise ValueError("plain exception")

    @endpoint
    def raise_base(self) -> None:
        raise KeyboardInterrupt("base exception")

    @endpoint(explicit_response_port=True)
    def ported_raise(self, port: Port) -> None:
        raise ValueError("explicit-port exception")

    @endpoint
    def exit(self, code: int) -> None:
        os._exit(code)

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def abort(self, reason: str | None) -> str:
        context().actor_instance.abort(reason)
        return "not delivered"


class Supervisor(Actor):
    """Owns a ``Fragile`` mesh on procs it is given; ``mode`` decides what ``__supervise__`` does.

    Every failure ``__supervise__`` sees is recorded and, when a ``report`` port is given,
    sent to it as well (so a test can wait for it instead of polling).
    """

    def __init__(self, procs, mode: str, report: Port[str] | None = None) -> None:
        self.mode = mode
        self.report = report
        self.seen: list[str] = []
        self.children = procs.spawn("fragile", Fragile)

    def record(self, entry: str) -> None:
        self.seen.append(entry)
        if self.report is not None:
            self.report.send(entry)

    @endpoint
    def child(self):
        return self.children

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def fail_child(self, rank: int) -> None:
        self.children.slice(gpus=rank).raise_exc.broadcast()

    @endpoint
    def seen_failures(self) -> list[str]:
        return list(self.seen)

    @endpoint
    def healthy_values(self) -> list[str]:
        return self.children.slice(gpus=1).ok.call().get().values()

    def __supervise__(self, failure):
        self.record(f"{failure.mesh_name}:{failure.rank}:{failure.cause}")
        if self.mode == "raise":
            raise RuntimeError("supervise hook raised on purpose")
        return self.mode == "handle"


class AsyncSupervisor(Supervisor):
    async def __supervise__(self, failure):
        await asyncio.sleep(0)
        self.record(f"async:{failure.mesh_name}:{failure.rank}")
        return True


class RefUser(Actor):
    """Calls a mesh it was handed (a reference, not its own)."""

    @endpoint
    def call_ok(self, mesh) -> str:
        try:
            return str(mesh.ok.call().get(timeout=scaled(10)).values())
        except Exception as exc:  # noqa: BLE001 - the test inspects the text
            return f"{type(exc).__name__}: {exc}"


class Cleaner(Actor):
    """Reports its ``__cleanup__`` and handled messages through a port; may own a child."""

    def __init__(self, port: Port, tag: str, child_procs=None, slow_cleanup: bool = False,
                 async_cleanup: bool = False) -> None:
        self.port = port
        self.tag = tag
        self.slow_cleanup = slow_cleanup
        self.async_cleanup = async_cleanup
        self.child = child_procs.spawn("cleaner_child", Cleaner, port, f"{tag}.child") if child_procs else None

    @endpoint
    def work(self, i: int) -> int:
        self.port.send(f"{self.tag} work {i}")
        return i

    @endpoint
    def child_mesh(self):
        return self.child

    def __cleanup__(self, exc):
        if self.slow_cleanup:
            threading.Event().wait()  # never returns: the stop must not wait for it forever
        if self.async_cleanup:
            return self._async_cleanup()
        self.port.send(f"{self.tag} cleanup")
        return None

    async def _async_cleanup(self) -> None:
        await asyncio.sleep(0)
        self.port.send(f"{self.tag} async cleanup")


class Finalizer(Actor):
    """Writes a file from an atexit handler: it runs only if the proc exits normally."""

    @endpoint
    def arm(self, path: str) -> int:
        import atexit

        def finalize() -> None:
            with open(path, "w") as f:
                f.write("finalized")

        atexit.register(finalize)
        return os.getpid()


class Nester(Actor):
    """Spawns procs and actors from inside an actor (it owns them)."""

    @endpoint
    def nest(self, n: int) -> list[int]:
        from tetrarch import this_host

        self.procs = this_host().spawn_procs(per_host={"gpus": n})
        self.mesh = self.procs.spawn("nested", Fragile)
        return self.mesh.pid.call().get(timeout=scaled(30)).values()

    @endpoint
    def here(self) -> dict:
        from tetrarch import this_proc

        inst = context().actor_instance
        local = this_proc().spawn("local", Fragile)  # on this actor's own proc
        return {"name": inst.name, "rank": dict(inst.rank), "proc": repr(inst.proc), "pid": os.getpid(),
                "local_pid": local.pid.call_one().get(timeout=scaled(10)), "proc_len": len(inst.proc)}

    @endpoint
    def spawn_on(self, procs, host) -> tuple[list[int], list[int]]:
        """Spawn on a ProcMesh and on a new proc mesh of a HostMesh, both passed by reference."""
        on_procs = procs.spawn("on_ref", Fragile).pid.call().get(timeout=scaled(30)).values()
        self.more = host.spawn_procs(per_host={"gpus": 1})
        on_host = self.more.spawn("on_host", Fragile).pid.call().get(timeout=scaled(30)).values()
        return on_procs, on_host

    @endpoint
    def echo(self, value):
        return value
