"""What a caller asks of :meth:`Registry.select`: a frozen :class:`SelectionRequest`, which the
``tetrarch_select_backend`` hooks receive.

Plugin API 1.0/1.1 passed a mapping with keys (``{"require": {...}, "allow_fallback":
False}``); a request still reads like that mapping (``request["require"]``,
``request.get("meshes")``, ``"require" in request``) for hooks written then, a deprecated
view that holds the fields set to something else than their defaults. Callers of
:meth:`Registry.select` may still pass such a mapping: :meth:`SelectionRequest.of` turns it
into a request.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, dataclass, field, fields
from types import MappingProxyType
from typing import Any

from .._errors import ArgumentError, ArgumentTypeError
from ._specs import BackendKind, Capability, capability_set

__all__ = ["SelectionRequest", "capability_names"]


def capability_names(capabilities: frozenset[Capability | str]) -> list[str]:
    """``["multi-host", "same-host"]``: sorted plain strings, for messages."""
    return sorted(str(c) for c in capabilities)


_EMPTY: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class SelectionRequest:
    """What a selection of a backend of ``kind`` asks for; given to ``tetrarch_select_backend``.

    Fields:
        kind: the kind of backend selected.
        require: capabilities the backend must have (strings are normalised as in
            :class:`BackendSpec`); core's policy picks only backends having all of them.
        allow_fallback: RDMA: False refuses a core backend (``tcp``, ``shm``) chosen while an
            installed hardware backend was skipped (``BackendUnavailable``); True lets it
            through (warned about, unless ``fallback_warning`` is False), as the
            ``rdma_fallback`` setting allows.
        fallback_warning: RDMA: False checks the fallback but does not warn (the caller
            warns where the fallback carries traffic).
        scheme: transports: the bare scheme of the address being served (``"tcp"`` for
            ``tcp://h:1`` or ``zmq+tcp://h:1``), else None; every candidate serves it. The
            registry fills it from ``select(address=...)``.
        meshes: allocators: the job's meshes and their host counts (``{"trainers": 2}``), empty
            for ``this_host()``.

    Raises:
        TypeError: ``require`` holds something other than strings, or a field has the wrong type.
        ValueError: ``kind`` is no backend kind, or ``scheme`` is set for another kind or is no bare scheme.
    """

    kind: BackendKind
    require: frozenset[Capability | str] = frozenset()
    allow_fallback: bool = True
    fallback_warning: bool = True
    scheme: str | None = None
    meshes: Mapping[str, int] = field(default_factory=lambda: _EMPTY, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", BackendKind(self.kind))
        object.__setattr__(self, "require", capability_set(self.require, "require"))
        for name in ("allow_fallback", "fallback_warning"):
            if not isinstance(getattr(self, name), bool):
                raise ArgumentTypeError(f"SelectionRequest.{name} must be a bool, got {getattr(self, name)!r}")
        if self.scheme is not None and (self.kind is not BackendKind.TRANSPORT or not isinstance(self.scheme, str)
                                        or not self.scheme or any(c in self.scheme for c in "+:/")):
            raise ArgumentError(f"SelectionRequest.scheme {self.scheme!r}: only a transport's request has one, a bare "
                                f"address scheme such as 'tcp'")
        if not isinstance(self.meshes, Mapping):
            raise ArgumentTypeError(f"SelectionRequest.meshes must be a mapping, got {self.meshes!r}")
        object.__setattr__(self, "meshes", MappingProxyType(dict(self.meshes)))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled by its fields (``meshes`` is a read-only view, which pickle cannot take as it is)."""
        return (SelectionRequest, (self.kind, self.require, self.allow_fallback, self.fallback_warning, self.scheme,
                                   dict(self.meshes)))

    @classmethod
    def of(cls, kind: BackendKind, request: SelectionRequest | Mapping[str, object] | None) -> SelectionRequest:
        """``request`` as a request for ``kind``: a :class:`SelectionRequest` as it is, a mapping
        of plugin API 1.1 (keys named as the fields) turned into one, None the default request.

        Raises:
            ValueError: the request is for another kind, or the mapping has a key that is no field.
            TypeError: ``request`` is neither, or a value has the wrong type.
        """
        kind = BackendKind(kind)
        if request is None:
            return cls(kind)
        if isinstance(request, SelectionRequest):
            if request.kind is not kind:
                raise ArgumentError(f"a request for a {request.kind.value} backend cannot select a {kind.value} one")
            return request
        if not isinstance(request, Mapping):
            raise ArgumentTypeError(f"request must be a tetrarch.plugins.SelectionRequest, got {request!r}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(str(k) for k in request if k not in known)
        if unknown:
            raise ArgumentError(f"request keys {unknown} are no SelectionRequest fields ({', '.join(sorted(known))})")
        values: dict[str, Any] = {k: v for k, v in request.items() if v is not None}
        values.setdefault("kind", kind)
        return cls.of(kind, cls(**values))

    def asked(self) -> dict[str, object]:
        """The fields set to something else than their defaults, ``kind`` aside (for messages and JSON)."""
        out = self._set_fields()
        if "require" in out:
            out["require"] = capability_names(self.require)
        if "meshes" in out:
            out["meshes"] = dict(self.meshes)
        return out

    def _set_fields(self) -> dict[str, object]:
        """The fields set to something else than their defaults, ``kind`` aside, as they are."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name != "kind" and getattr(self, f.name) != _default(f.name)}

    # ------------------------------------------------------------ deprecated: the mapping of plugin API 1.1

    def _legacy(self) -> dict[str, object]:
        warnings.warn("reading a SelectionRequest as a mapping (request['require'], request.get(...)) is deprecated "
                      "since plugin API 1.2: read its fields (request.require)", DeprecationWarning, stacklevel=3)
        return self._set_fields()

    def __getitem__(self, key: str) -> object:
        """Deprecated: ``request["require"]`` as plugin API 1.1 hooks read it; KeyError for a field at its default."""
        return self._legacy()[key]

    def get(self, key: str, default: object = None) -> object:
        """Deprecated: ``request.get("require")`` as plugin API 1.1 hooks read it."""
        return self._legacy().get(key, default)

    def __contains__(self, key: object) -> bool:
        """Deprecated: ``"require" in request``: whether that field is set to something else than its default."""
        return key in self._legacy()

    def keys(self) -> Iterator[str]:
        """Deprecated: the fields set to something else than their defaults (``dict(request)`` works)."""
        return iter(self._legacy())


def _default(name: str) -> object:
    """The default of the field ``name``."""
    f = next(f for f in fields(SelectionRequest) if f.name == name)
    return f.default_factory() if f.default_factory is not MISSING else f.default
