"""First-party backends and the extra that installs each (fsspec's ``known_implementations``).

Core never imports a plugin; this table only lets ``tetrarch plugins`` and the errors of
:meth:`Registry.select` say *what to install* for a backend that is absent. Core's own
backends (ipc/tcp transports, tcp/shm RDMA) are never absent, so they are not listed.
The ``local`` allocator is listed although ``tetrarch`` depends on its distribution,
``tetrarch-alloc-local``: where that is missing anyway (uninstalled, or ``pip install
--no-deps tetrarch``), ``this_host()`` says to install it by its own name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ._specs import BackendKind

__all__ = [
    "KNOWN_BACKENDS",
    "NOT_IMPLEMENTED_YET",
    "KnownBackend",
    "known_backend",
    "known_for_distribution",
    "normalize_dist",
]


@dataclass(frozen=True, slots=True)
class KnownBackend:
    """A backend shipped by one of tetrarch's own plugin distributions."""

    kind: BackendKind
    name: str
    distribution: str
    extra: str
    #: ``tetrarch`` itself depends on the distribution: the hint names it, not an extra.
    core_dependency: bool = False

    @property
    def hint(self) -> str:
        """The command that installs it, e.g. ``pip install "tetrarch[zmq]"`` (``pip install tetrarch-alloc-local``
        for a distribution ``tetrarch`` depends on: installing ``tetrarch[local]`` over a tetrarch already
        installed would not say what is missing)."""
        if self.core_dependency:
            return f"pip install {self.distribution}"
        return f'pip install "tetrarch[{self.extra}]"'

    @property
    def implemented(self) -> bool:
        """False while its code is not written (its plugin says ``BackendSpec(implemented=False)``)."""
        return (self.kind, self.name) not in NOT_IMPLEMENTED_YET


_T, _R, _A = BackendKind.TRANSPORT, BackendKind.RDMA, BackendKind.ALLOCATOR

KNOWN_BACKENDS: Mapping[tuple[BackendKind, str], KnownBackend] = {
    (k.kind, k.name): k
    for k in (
        KnownBackend(_T, "zmq", "tetrarch-transport-zmq", "zmq"),
        KnownBackend(_T, "nng", "tetrarch-transport-nng", "nng"),
        KnownBackend(_R, "verbs", "tetrarch-rdma-verbs", "verbs"),
        KnownBackend(_R, "efa", "tetrarch-rdma-efa", "efa"),
        KnownBackend(_A, "local", "tetrarch-alloc-local", "local", core_dependency=True),
        KnownBackend(_A, "slurm", "tetrarch-alloc-slurm", "slurm"),
    )
}

#: First-party backends whose code is not written yet. When such a distribution is absent,
#: its row says "not implemented" rather than telling users to install it; a test checks
#: this agrees with the ``implemented`` flag of each installed plugin's spec.
#: (Empty now that every first-party backend is written; kept for the next one.)
NOT_IMPLEMENTED_YET: frozenset[tuple[BackendKind, str]] = frozenset()


def normalize_dist(name: str) -> str:
    """PEP 503 normalisation: ``Tetrarch_Transport.ZMQ`` -> ``tetrarch-transport-zmq``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def known_backend(kind: BackendKind, name: str) -> KnownBackend | None:
    """The first-party backend of that kind and name, or None."""
    return KNOWN_BACKENDS.get((kind, name))


def known_for_distribution(distribution: str) -> list[KnownBackend]:
    """The first-party backends a distribution ships (empty for third-party ones)."""
    dist = normalize_dist(distribution)
    return [k for k in KNOWN_BACKENDS.values() if k.distribution == dist]
