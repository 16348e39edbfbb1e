"""Frozen records that plugins return from their hooks and the registry reports."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["BackendKind", "BackendSpec", "BackendStatus", "ProbeResult", "Status"]


class BackendKind(str, enum.Enum):
    """What a backend provides."""

    TRANSPORT = "transport"
    RDMA = "rdma"
    ALLOCATOR = "allocator"


class Status(str, enum.Enum):
    """Health of one backend as seen by this process."""

    AVAILABLE = "available"
    UNAVAILABLE = "unavailable"  # installed, but its probe says it cannot run here
    BROKEN = "broken"  # its plugin raised while loading
    NOT_INSTALLED = "not installed"  # a first-party backend whose distribution is absent
    CONFLICT = "conflict"  # two distributions register the same kind and name
    NOT_IMPLEMENTED = "not implemented"  # its plugin declares it (BackendSpec.implemented=False): code not written yet
    DISABLED = "disabled"  # its plugin is named by the disable_plugins setting (TETRARCH_DISABLE_PLUGINS)
    INCOMPATIBLE = "incompatible"  # its plugin was written for a plugin API version this tetrarch cannot load


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """What a probe found. Probes are fast, side-effect free and never raise."""

    ok: bool
    reason: str = ""
    remedy: str = ""
    #: Works here, but only an explicit choice selects it (a name, the kind's setting):
    #: automatic selection passes it over (``tetrarch plugins`` shows ``available on request``).
    on_request: bool = False

    @classmethod
    def yes(cls, reason: str = "", *, on_request: bool = False) -> ProbeResult:
        """The backend can run here; ``on_request``: but it is never picked automatically."""
        return cls(True, reason, "", on_request)

    @classmethod
    def no(cls, reason: str, remedy: str = "") -> ProbeResult:
        """The backend cannot run here: ``reason`` says why, ``remedy`` what to do about it."""
        return cls(False, reason, remedy)


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """A backend a plugin offers.

    ``factory`` is an import string ``"package.module:Name"``, resolved only when the
    backend is used, so listing plugins never imports pyzmq, pynng, pyverbs or torch.
    ``probe`` is called (never raising) to learn whether the backend can run here.

    ``implemented=False`` declares a backend whose code is not written yet (its factory
    is a placeholder). That fact goes first: its row's status is ``not implemented``
    whatever the probe finds (the probe's finding is kept as context, its remedy is
    dropped: nobody should install hardware tools for a backend that cannot run), the
    row's hint names only backends of the kind that are available, and selection
    refuses it by name and never picks it automatically.
    """

    kind: BackendKind
    name: str
    factory: str
    probe: Callable[[], ProbeResult] | None = None
    priority: int = 0
    extra: str = ""  # the `tetrarch[extra]` that installs it
    summary: str = ""
    schemes: tuple[str, ...] = ()  # transports: address schemes served
    capabilities: frozenset[str] = field(default_factory=frozenset)
    implemented: bool = True


@dataclass(frozen=True, slots=True)
class BackendStatus:
    """One row of ``tetrarch plugins``: a backend and how it stands here."""

    kind: BackendKind
    name: str
    status: Status
    distribution: str
    version: str
    reason: str = ""
    hint: str = ""
    spec: BackendSpec | None = None
    on_request: bool = False  #: available, but selected only by name or setting (see ProbeResult)

    @property
    def shown(self) -> str:
        """The status as ``tetrarch plugins`` prints it (``available on request`` for such a row)."""
        return f"{self.status.value} on request" if self.on_request else self.status.value
