"""Frozen records that plugins return from their hooks and the registry reports.

One spec type per kind (:class:`TransportSpec`, :class:`RdmaBackendSpec`,
:class:`AllocatorSpec`), each with only the fields its kind has, over the common base
:class:`BackendSpec` (which plugins written for plugin API 1.0/1.1 build directly, and
still may). Capabilities are :class:`Capability` members, one word per meaning.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

__all__ = [
    "CAPABILITY_ALIASES",
    "AllocatorSpec",
    "BackendKind",
    "BackendSpec",
    "BackendStatus",
    "Capability",
    "ProbeResult",
    "RdmaBackendSpec",
    "Status",
    "TransportSpec",
    "capability_set",
]


class BackendKind(str, enum.Enum):
    """What a backend provides."""

    TRANSPORT = "transport"
    RDMA = "rdma"
    ALLOCATOR = "allocator"


class Capability(str, enum.Enum):
    """What a backend can do, one word per meaning, for every kind.

    A spec lists its capabilities; a :class:`SelectionRequest` lists those it requires
    (``require``), and core's policy picks only backends having all of them. Members are
    strings (``Capability.SAME_HOST == "same-host"``), so sets of either compare equal.
    """

    #: Works between processes of one host: a transport connecting them, an RDMA backend
    #: moving their memory, an allocator whose host agents run on this machine (``this_host()`` needs it).
    SAME_HOST = "same-host"
    #: Works between processes on different hosts: a transport or RDMA backend reaching
    #: peers elsewhere, an allocator whose host agents run on other hosts (``Allocator.spans_hosts``).
    MULTI_HOST = "multi-host"

    def __str__(self) -> str:
        return self.value  # "same-host" in messages and f-strings on every Python


#: Older spellings, accepted wherever a capability is and normalised without a warning:
#: transports of plugin API 1.0/1.1 said ``"local"`` for what is :attr:`Capability.SAME_HOST`.
CAPABILITY_ALIASES: dict[str, Capability] = {"local": Capability.SAME_HOST}


def capability_set(values: Iterable[Capability | str] | str | None, what: str = "capabilities"
                   ) -> frozenset[Capability | str]:
    """``values`` as a frozen set: each a :class:`Capability` (its value or a legacy alias,
    :data:`CAPABILITY_ALIASES`, becomes the member); any other string is a plugin's own tag,
    kept as given and matched exactly. A lone string is one capability.

    Raises:
        TypeError: ``values`` is no string nor iterable of strings.
    """
    if values is None:
        return frozenset()
    items = (values,) if isinstance(values, str) else values
    try:
        listed = list(items)
    except TypeError:
        raise TypeError(f"{what} must be a set of Capability members or strings, got {values!r}") from None
    out: set[Capability | str] = set()
    for item in listed:
        if isinstance(item, Capability):
            out.add(item)
        elif isinstance(item, str):
            try:
                out.add(Capability(item))
            except ValueError:
                out.add(CAPABILITY_ALIASES.get(item, item))
        else:
            raise TypeError(f"{what} must be Capability members or strings, got {item!r} in {values!r}")
    return frozenset(out)


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


#: A scheme: the bare scheme of the addresses a transport serves (``tcp`` of ``tcp://h:1``).
_SCHEME_RE = re.compile(r"[a-z][a-z0-9.-]*")


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """A backend a plugin offers: the common base of :class:`TransportSpec`,
    :class:`RdmaBackendSpec` and :class:`AllocatorSpec`, which plugins build instead
    (``BackendSpec(BackendKind.TRANSPORT, ...)`` still works: plugins written for plugin
    API 1.0/1.1 build it, and load unchanged).

    ``factory`` is an import string ``"package.module:Name"``, resolved only when the
    backend is used, so listing plugins never imports pyzmq, pynng, pyverbs or torch.
    ``probe`` is called (never raising) to learn whether the backend can run here.

    ``capabilities`` are :class:`Capability` members (strings naming one, and the legacy
    ``"local"``, are normalised to them; other strings are a plugin's own tags).
    ``schemes`` (transports) are bare address schemes (``"tcp"``, ``"ipc"``); the base
    also accepts a qualified one (``"zmq+tcp"``), taken as its bare scheme.

    ``implemented=False`` declares a backend whose code is not written yet (its factory
    is a placeholder). That fact goes first: its row's status is ``not implemented``
    whatever the probe finds (the probe's finding is kept as context, its remedy is
    dropped: nobody should install hardware tools for a backend that cannot run), the
    row's remedy names only backends of the kind that are available, and selection
    refuses it by name and never picks it automatically.

    Raises:
        TypeError: ``capabilities`` holds something other than strings, or a per-kind type
            got a kind first (``TransportSpec(BackendKind.TRANSPORT, ...)``: its kind is its type).
    """

    kind: BackendKind
    name: str
    factory: str
    probe: Callable[[], ProbeResult] | None = None
    priority: int = 0
    extra: str = ""  # the `tetrarch[extra]` that installs it
    summary: str = ""
    schemes: tuple[str, ...] = ()  # transports: the bare address schemes served
    capabilities: frozenset[Capability | str] = field(default_factory=frozenset)
    implemented: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.name, BackendKind):
            raise TypeError(f"{type(self).__name__}(name, factory, ...) takes no kind: its kind is its type "
                            f"({self.name.value}); got {self.name!r} as the name")
        object.__setattr__(self, "capabilities", capability_set(self.capabilities))
        schemes = (self.schemes,) if isinstance(self.schemes, str) else tuple(self.schemes)
        object.__setattr__(self, "schemes", tuple(s.rpartition("+")[2] if isinstance(s, str) else s
                                                  for s in schemes))


@dataclass(frozen=True, slots=True)
class TransportSpec(BackendSpec):
    """A transport a plugin offers (hook ``tetrarch_transports``).

    ``schemes`` are the *bare* schemes of the addresses it serves: ``("tcp", "ipc")``
    for a transport listening at ``tcp://host:port`` and ``ipc://path``. Users may
    qualify an address with the backend's name (``zmq+tcp://host:port``: the registry
    then selects ``zmq``); the scheme is still ``tcp``, and the kernel hands the
    transport the bare address (``tcp://host:port``) to listen at.

    Raises:
        ValueError: a scheme is not a bare scheme (``"zmq+tcp"``, ``"TCP"``, ``"tcp://"``).
        TypeError: as :class:`BackendSpec`.
    """

    kind: BackendKind = field(default=BackendKind.TRANSPORT, init=False)

    def __post_init__(self) -> None:
        schemes = (self.schemes,) if isinstance(self.schemes, str) else tuple(self.schemes)
        for scheme in schemes:
            if not isinstance(scheme, str) or not _SCHEME_RE.fullmatch(scheme):
                bare = scheme.rpartition("+")[2].partition(":")[0] if isinstance(scheme, str) else "tcp"
                raise ValueError(f"transport {self.name!r}: scheme {scheme!r} is no bare address scheme; a scheme "
                                 f"is what precedes :// in the addresses it serves, e.g. {bare!r}")
        BackendSpec.__post_init__(self)


@dataclass(frozen=True, slots=True)
class RdmaBackendSpec(BackendSpec):
    """An RDMA backend a plugin offers (hook ``tetrarch_rdma_backends``); it serves no addresses (no ``schemes``).

    Raises:
        TypeError: as :class:`BackendSpec`.
    """

    kind: BackendKind = field(default=BackendKind.RDMA, init=False)
    schemes: tuple[str, ...] = field(default=(), init=False, repr=False)


@dataclass(frozen=True, slots=True)
class AllocatorSpec(BackendSpec):
    """An allocator a plugin offers (hook ``tetrarch_allocators``); it serves no addresses (no ``schemes``).

    Its capabilities say where its host agents run: :attr:`Capability.SAME_HOST` (this
    machine: ``this_host()`` may use it) and/or :attr:`Capability.MULTI_HOST` (other hosts;
    its ``Allocator.spans_hosts`` is then true).

    Raises:
        TypeError: as :class:`BackendSpec`.
    """

    kind: BackendKind = field(default=BackendKind.ALLOCATOR, init=False)
    schemes: tuple[str, ...] = field(default=(), init=False, repr=False)


@dataclass(frozen=True, slots=True)
class BackendStatus:
    """One row of ``tetrarch plugins``: a backend and how it stands here.

    ``reason`` says why it stands so, ``remedy`` what to do about it (a probe's
    :attr:`ProbeResult.remedy`, or the ``pip install`` of an absent first-party backend).
    """

    kind: BackendKind
    name: str
    status: Status
    distribution: str
    version: str
    reason: str = ""
    remedy: str = ""
    spec: BackendSpec | None = None
    on_request: bool = False  #: available, but selected only by name or setting (see ProbeResult)

    @property
    def hint(self) -> str:
        """Deprecated alias of :attr:`remedy` (its name before plugin API 1.2), kept for code reading it."""
        return self.remedy

    @property
    def shown(self) -> str:
        """The status as ``tetrarch plugins`` prints it (``available on request`` for such a row)."""
        return f"{self.status.value} on request" if self.on_request else self.status.value
