"""What the admin API reports, gathered when a request comes (never before).

The client's own books give hosts, procs, meshes and failures. What only a proc knows
(its memory, CPU, threads, and its actors' states, queues and running endpoints) comes
from asking each live proc over the router (``proc``/``introspect``,
:mod:`tetrarch._runtime.actors._introspect`), all at once, each answer awaited for at most
``timeout`` seconds: a proc that does not answer in time (stopped, or holding the GIL) is
reported as not answering, and never holds the request up longer.
"""

from __future__ import annotations

import pickle
from typing import Any

from .._runtime.meshes._shutdown import _live_host_meshes, _live_proc_meshes
from .._runtime.plumbing._stop_guard import class_name
from .._runtime.process._root import Root
from .._runtime.services._ask import Request, ask
from .._runtime.values import _wire

__all__ = ["Snapshot"]


def _failure(f: Any) -> dict[str, Any]:
    return {"mesh": f.mesh_name, "mesh_key": f.mesh_key, "rank": f.rank, "actor": f.actor,
            "class": f.actor_class or None, "endpoint": f.endpoint or None, "host": f.host, "pid": f.pid,
            "cause": f.cause, "received": bool(getattr(f, "received", False)),
            "causes": [_failure(c) for c in f.causes]}


class Snapshot:
    """One request's view of the program: the client's books plus, when asked, every proc's answer."""

    def __init__(self, root: Root, timeout: float) -> None:
        self.root = root
        self.timeout = timeout
        self._answers: dict[str, dict[str, Any]] | None = None
        #: Seconds each proc (by address) took to answer its introspection.
        self.latency: dict[str, float] = {}

    # -- the client's books -------------------------------------------------------
    def hosts(self) -> list[dict[str, Any]]:
        dead = self.root.router.dead_peers
        rows = []
        for mesh in list(_live_host_meshes):
            for index, rec in enumerate(getattr(mesh, "_host_records", [])):
                alive = rec.returncode is None and rec.address not in dead
                rows.append({"mesh": mesh._name, "index": index, "ident": rec.ident, "address": rec.address,
                             "pid": rec.pid, "hostname": rec.hostname, "allocator": mesh._allocator,
                             "state": "running" if alive else "exited", "returncode": rec.returncode})
        return rows

    def _proc_records(self) -> list[tuple[str, Any]]:
        seen: set[str] = set()
        out = []
        for pm in list(_live_proc_meshes):
            for rec in pm._procs:
                if rec.ident not in seen:
                    seen.add(rec.ident)
                    out.append((pm._name, rec))
        return out

    def procs(self) -> list[dict[str, Any]]:
        answers = self._ask()
        dead = self.root.router.dead_peers
        rows = []
        for mesh, rec in self._proc_records():
            gone = rec.returncode is not None or rec.address in dead
            answer = answers.get(rec.address)
            row: dict[str, Any] = {
                "ident": rec.ident, "mesh": mesh, "name": rec.what, "address": rec.address, "pid": rec.pid,
                "host": rec.hostname, "agent": rec.meta.get("agent"), "returncode": rec.returncode,
                "state": "exited" if gone else ("running" if answer is not None else "not answering"),
                "rss_bytes": None, "cpu_s": None, "threads": None, "transport": None, "actors": None,
            }
            if answer is not None:
                row.update(rss_bytes=answer["rss_bytes"], cpu_s=answer["cpu_s"], threads=answer["threads"],
                           transport=answer["transport"], actors=len(answer["actors"]))
            if gone and dead.get(rec.address):
                row["reason"] = dead[rec.address]
            rows.append(row)
        return rows

    def actors(self) -> list[dict[str, Any]]:
        answers = self._ask()
        rows = []
        for mesh, rec in self._proc_records():
            answer = answers.get(rec.address)
            if answer is None:
                continue
            for actor in answer["actors"]:
                rows.append({**actor, "proc": rec.ident, "proc_mesh": mesh, "pid": answer["pid"],
                             "host": answer["host"]})
        rows.sort(key=lambda r: (r["mesh"], r["rank"]))
        return rows

    def meshes(self) -> list[dict[str, Any]]:
        rows = []
        for key, name, mesh, state, proc_state, ranks in self.root.supervisor.owned():
            shape = getattr(mesh, "_shape", None)
            labels = list(shape.labels) if shape is not None else []
            sizes = list(shape.sizes) if shape is not None else []
            cls = getattr(mesh, "_cls", None)
            pm = getattr(mesh, "_proc_mesh", None)
            stopped = state.stopped or bool(proc_state is not None and proc_state.stopped)
            rows.append({"key": key, "name": name, "class": class_name(cls) if cls else None,
                         "labels": labels, "sizes": sizes, "actors": len(ranks),
                         "proc_mesh": getattr(pm, "_name", None),
                         "state": "stopped" if stopped else ("failed" if state.failed else "running"),
                         "failed_ranks": sorted(state.failed)})
        return rows

    def failures(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for _key, _name, _mesh, state, _ps, _ranks in self.root.supervisor.owned():
            rows.extend(_failure(f) for f in state.failed.values())
        return rows

    def backends(self) -> dict[str, Any]:
        answers = self._ask()
        allocators = sorted({getattr(m, "_allocator", "") for m in list(_live_host_meshes)} - {""})
        return {"client": {"transport": self.root.transport_name, "allocators": allocators},
                "procs": [{"ident": rec.ident, "transport": answers[rec.address]["transport"]}
                          for _mesh, rec in self._proc_records() if rec.address in answers]}

    def stack(self, mesh: str, rank: int, dump_timeout: float) -> dict[str, Any]:
        """The stacks of the proc of actor ``rank`` of the actor mesh ``mesh``: py-spy's dump through its host
        agent (seen even when the proc holds its GIL) and the proc's own view of its Python threads.

        Raises:
            LookupError: no tracked actor mesh has that name, or it has no such rank (the message says which).
        """
        owned = [o for o in self.root.supervisor.owned() if o[1] == mesh]
        if not owned:
            names = sorted({o[1] for o in self.root.supervisor.owned()})
            raise LookupError(f"no actor mesh named {mesh!r} (meshes: {', '.join(names) or 'none'})")
        ranks = owned[-1][5]
        found = [r for r in ranks if r[1] == rank]
        if not found:
            raise LookupError(f"actor mesh {mesh!r} has no rank {rank} (ranks 0 to {len(ranks) - 1})")
        address, _rank, display, host, pid = found[0]
        agent = next((rec.meta.get("agent") for _m, rec in self._proc_records() if rec.address == address), None)
        out: dict[str, Any] = {"mesh": mesh, "rank": rank, "actor": display, "pid": pid, "host": host,
                               "state": "exited" if address in self.root.router.dead_peers else "running",
                               "threads": None, "pyspy": None, "notes": []}
        if out["state"] == "exited":
            out["notes"].append(f"its proc is gone: {self.root.router.dead_peers[address]}")
            return out
        requests = [Request(address, _wire.SVC_PROC, "stack")]
        if agent:
            requests.append(Request(agent, _wire.SVC_STACK, "dump", (pickle.dumps(pid),)))
        answers = [a.value if a.ok else None
                   for a in ask(self.root.router, requests, [self.timeout, dump_timeout][:len(requests)])]
        own, spy = answers[0], answers[1] if agent else None
        if own is not None:
            out["threads"] = own["threads"]
        else:
            out["state"] = "not answering"
            out["notes"].append(f"the proc did not answer within {self.timeout:g} s (stopped, or a C call holds its "
                                f"GIL): only py-spy can show it")
        if spy is None:
            out["notes"].append("its host agent did not answer for py-spy" if agent else "its host agent is unknown")
        else:
            out["pyspy"] = spy["text"] or None
            if spy["note"]:
                out["notes"].append(spy["note"])
        return out

    def probe(self, slow_s: float) -> list[dict[str, Any]]:
        """``tetrarch doctor mesh``: every host agent pinged, every live proc asked, every tracked actor found
        in its proc's answer; each check ``pass``, ``slow`` (answered after ``slow_s``) or ``fail``."""
        checks: list[dict[str, Any]] = []

        def check(kind: str, name: str, pid: int, host: str, latency: float | None, fail: str = "") -> None:
            status = "fail" if fail else ("slow" if latency is not None and latency > slow_s else "pass")
            checks.append({"kind": kind, "name": name, "pid": pid, "host": host, "status": status,
                           "latency_ms": None if latency is None else round(latency * 1e3, 3), "detail": fail})

        rt = self.root.router
        hosts = self.hosts()
        running = [h for h in hosts if h["state"] == "running"]
        pings = dict(zip((h["address"] for h in running), ask(rt, [Request(h["address"], _wire.SVC_LAUNCH, "ping")
                                                                    for h in running], self.timeout), strict=True))
        for h in hosts:
            name = f"{h['mesh']}[{h['index']}]"
            ping = pings.get(h["address"])
            if ping is None:
                check("host agent", name, h["pid"], h["hostname"], None,
                      f"exited: {rt.dead_peers.get(h['address'], h['returncode'])}")
            else:
                check("host agent", name, h["pid"], h["hostname"], ping.seconds,
                      "" if ping.ok else f"did not answer a ping within {self.timeout:g} s")
        answers = self._ask()
        procs = {p["address"]: p for p in self.procs()}
        for p in procs.values():
            fail = ""
            if p["state"] == "exited":
                fail = f"exited: {p.get('reason') or p['returncode']}"
            elif p["state"] == "not answering":
                fail = f"did not answer within {self.timeout:g} s (stopped, or a C call holds its GIL)"
            check("proc", p["name"], p["pid"], p["host"], self.latency.get(p["address"]), fail)
        for key, _name, _mesh, state, _ps, ranks in self.root.supervisor.owned():
            for address, rank, display, host, pid in ranks:
                answer = answers.get(address)
                found = [a for a in answer["actors"] if a["key"] == key] if answer else []
                fail = ""
                if rank in state.failed:
                    fail = f"failed: {state.failed[rank].cause}"
                elif answer is None:
                    fail = "its proc did not answer" if address in procs else "its proc is not tracked"
                elif not found:
                    fail = "not found in its proc"
                elif found[0]["state"] in ("failed", "stopped"):
                    fail = f"{found[0]['state']}: {found[0]['failure'] or ''}".rstrip(": ")
                check("actor", display, pid, host, self.latency.get(address), fail)
        return checks

    # -- asking the procs -------------------------------------------------------------
    def _ask(self) -> dict[str, dict[str, Any]]:
        """Every live proc's introspection record by address (those that answered in time)."""
        if self._answers is not None:
            return self._answers
        rt = self.root.router
        targets = [rec.address for _m, rec in self._proc_records()
                   if rec.returncode is None and rec.address and rec.address not in rt.dead_peers]
        answers = ask(rt, [Request(address, _wire.SVC_PROC, "introspect") for address in targets], self.timeout)
        self._answers = {address: a.value for address, a in zip(targets, answers, strict=True) if a.ok}
        self.latency = {address: a.seconds for address, a in zip(targets, answers, strict=True)
                        if a.ok and a.seconds is not None}
        return self._answers
