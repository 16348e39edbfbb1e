"""``WorkerJob``: named host meshes over workers that run ``run_worker_loop_forever`` (Monarch's ``LoginJob`` shape).

The workers were started by something else (a login script, ssh, systemd, a batch
job) and outlive every client, so this job is the one whose ``state()`` reuses a
cached job across runs: a later process that calls ``state()`` with the same spec
loads ``.monarch/job_state.pkl`` and attaches to the same workers, under the same
``apply_id``. ``kill()`` releases the workers (their procs are stopped; they wait for
their next client).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from ..._errors import ArgumentError, ArgumentTypeError
from ..._transport._route import host_of
from ._attach import attach_to_workers
from ._job import JobState, JobTrait, _checked_meshes, _shutdown
from ._proc_mesh import HostMesh
from ._worker_auth import check_address, read_secret_file

__all__ = ["WorkerJob"]

#: Seconds ``can_run`` gives each worker to accept a TCP connection.
_PROBE_S = 2.0


def _port_of(address: str) -> int | None:
    tail = address.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None


def _listening(address: str) -> bool:
    """Whether something accepts connections at ``address`` (tcp; other schemes are assumed up)."""
    host, port = host_of(address), _port_of(address)
    if not address.split("://", 1)[0].endswith("tcp") or host is None or port is None:
        return True
    try:
        with socket.create_connection((host, port), timeout=_PROBE_S):
            return True
    except OSError:
        return False


class WorkerJob(JobTrait):
    """Named host meshes whose hosts are running workers, given by address.

    ``WorkerJob({"trainers": ["tcp://10.0.0.2:26600", "tcp://10.0.0.3:26600"]}, secret_file="~/.tetrarch/secret")``,
    or ``WorkerJob(secret_file=...)`` then ``add_mesh(name, addresses)`` (Monarch's
    ``LoginJob.add_mesh``). Each mesh is ``attach_to_workers`` over its addresses
    (dimension ``hosts``). ``state()`` caches the job in ``.monarch/job_state.pkl`` by
    default and reuses it in later runs while the workers answer.

    Raises:
        ArgumentTypeError, ArgumentError: a mesh name that is no identifier, an empty or
            bad address list, or a worker in two meshes.
    """

    _outlives_client = True

    def __init__(self, meshes: Mapping[str, Sequence[str]] | None = None, *,
                 secret_file: str | os.PathLike[str] | None = None) -> None:
        super().__init__()
        self._secret_file = os.path.abspath(os.path.expanduser(os.fspath(secret_file))) if secret_file else None
        self._hosts: dict[str, list[str]] = {}
        self._meshes: dict[str, HostMesh] = {}
        for name, hosts in (meshes or {}).items():
            self.add_mesh(name, hosts)

    def add_mesh(self, name: str, hosts: Sequence[str]) -> None:
        """Add the mesh ``name`` over the workers at ``hosts`` (``tcp://host:port`` each).

        Raises:
            ArgumentTypeError, ArgumentError: as the class.
        """
        _checked_meshes({name: 1})
        if isinstance(hosts, str) or not isinstance(hosts, Sequence) or not hosts:
            raise ArgumentTypeError(f"mesh {name!r}: hosts must be a non-empty list of worker addresses, e.g. "
                                    f"['tcp://10.0.0.2:26600'], got {hosts!r}")
        used = {a for addresses in self._hosts.values() for a in addresses}
        for address in hosts:
            check_address(address, f"WorkerJob mesh {name!r}")
            if address in used:
                raise ArgumentError(f"mesh {name!r}: the worker at {address} is in another mesh already; a worker "
                                    f"serves one client's mesh")
        self._hosts[name] = list(hosts)

    @property
    def meshes(self) -> dict[str, list[str]]:
        """The spec: mesh name -> worker addresses."""
        return {name: list(a) for name, a in self._hosts.items()}

    def _create(self) -> None:
        """Check the spec and the secret file (the workers run already; nothing is started).

        Raises:
            ArgumentError: no mesh was added.
            SecretError: no usable secret file.
        """
        if not self._hosts:
            raise ArgumentError("this WorkerJob has no mesh: pass {'name': [addresses]} or call add_mesh() first")
        read_secret_file(self._secret_file, "WorkerJob")

    def _state(self) -> JobState:
        """Attach to the workers once (again after ``kill()``); a mesh whose attach failed raises when used."""
        for name, hosts in self._hosts.items():
            if name not in self._meshes:
                self._meshes[name] = attach_to_workers(workers=hosts, name=name, secret_file=self._secret_file)
        return JobState({name: self._meshes[name] for name in self._hosts})

    def _kill(self) -> None:
        """Release the workers: stop the procs on them and end this client's sessions (the workers live on)."""
        meshes, self._meshes = self._meshes, {}
        started = []
        for mesh in meshes.values():
            try:
                mesh.initialized.get()
            except Exception:  # noqa: BLE001 - never attached: nothing to release
                continue
            started.append(mesh)
        _shutdown(started)

    def can_run(self, spec: JobTrait) -> bool:
        """Whether ``spec`` is a ``WorkerJob`` of the same meshes and secret file, and every worker answers."""
        return (isinstance(spec, WorkerJob) and spec._hosts == self._hosts and spec._secret_file == self._secret_file
                and all(_listening(a) for hosts in self._hosts.values() for a in hosts))

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_meshes"] = {}  # a later process attaches itself
        return state

    def __repr__(self) -> str:
        return f"WorkerJob({self._hosts!r}, secret_file={self._secret_file!r})"
