"""The plugin registry: a typed facade over a pluggy ``PluginManager``.

Like conda's plugin manager: plugins are found through entry points (group
``tetrarch``), each backend gets a :class:`BackendStatus`, and the kernel asks for a
backend by kind with :meth:`Registry.select` / :meth:`Registry.create`.
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

import pluggy

from .._config import ALLOCATOR, DISABLE_PLUGINS, PLUGINS_STRICT, RDMA_BACKEND, TRANSPORT, Setting, probe_generation
from .._errors import ArgumentError, ArgumentTypeError
from . import _hookspecs
from ._builtin import BuiltinBackends, DefaultPolicy
from ._errors import BackendNotFound, BackendUnavailable
from ._explain import Explanation, Trace, trace_hooks
from ._fallback import FALLBACK_ENV, check_rdma_fallback
from ._hookspecs import PROJECT
from ._known import KNOWN_BACKENDS, known_for_distribution, normalize_dist
from ._loader import STATUS_OF_STATE, PluginRecord, PluginSource, PluginState, load_entry_points, load_sources
from ._refusals import no_such_backend, no_transport_for, not_usable
from ._request import SelectionRequest, capability_names
from ._rows import describe as _describe
from ._rows import is_absent, not_implemented_reason, spec_row, with_alternatives
from ._specs import BackendKind, BackendSpec, BackendStatus, Status

if TYPE_CHECKING:  # pragma: no cover - the runtime is never imported with the plugin layer
    from .._runtime.plumbing._alloc import Allocator
    from .._transport._base import Transport

__all__ = [
    "DISABLE_ENV",
    "ENV_BY_KIND",
    "FALLBACK_ENV",
    "SETTING_BY_KIND",
    "STRICT_ENV",
    "Registry",
    "get_allocator",
    "get_registry",
    "get_transport",
    "reset_registry",
    "split_address",
]

#: The setting (``tetrarch._config``) that chooses the backend of each kind.
SETTING_BY_KIND: Mapping[BackendKind, Setting[str | None]] = {
    BackendKind.TRANSPORT: TRANSPORT,
    BackendKind.RDMA: RDMA_BACKEND,
    BackendKind.ALLOCATOR: ALLOCATOR,
}
ENV_BY_KIND: Mapping[BackendKind, str] = {kind: setting.env for kind, setting in SETTING_BY_KIND.items()}
DISABLE_ENV = DISABLE_PLUGINS.env
STRICT_ENV = PLUGINS_STRICT.env
_CORE = "tetrarch"


def _core_version() -> str:
    from .._version import __version__

    return __version__


def _disabled_plugins() -> frozenset[str]:
    tokens = set(DISABLE_PLUGINS())
    return frozenset(tokens | {normalize_dist(t) for t in tokens})


def _chosen_by_setting(setting: Setting[str | None]) -> tuple[str | None, str]:
    """The backend name a setting chooses (``None``: none) and how to say where it came from."""
    value, source = setting.lookup()
    if value is None:
        return None, ""
    if source == "code":
        return value, f"configure({setting.key}={value!r})"
    return value, f"{setting.env}={value}"


def split_address(address: str) -> tuple[str | None, str, str]:
    """``"zmq+tcp://h:1"`` -> ``("zmq", "tcp", "h:1")``; ``"tcp://h:1"`` -> ``(None, "tcp", "h:1")``.

    Raises:
        ValueError: the address has no ``scheme://`` prefix.
    """
    scheme, sep, rest = address.partition("://")
    if not sep or not scheme:
        raise ArgumentError(f"address {address!r} has no scheme; expected e.g. 'tcp://127.0.0.1:0' or 'zmq+tcp://...'")
    backend, plus, base = scheme.partition("+")
    if plus:
        if not backend or not base:
            raise ArgumentError(f"address {address!r}: a qualified scheme reads 'backend+scheme://'")
        return backend, base, rest
    return None, scheme, rest


class Registry:
    """Every backend this process can see, its status, and how to pick one.

    Args:
        plugins: extra plugin objects to register as if a distribution provided them
            (tests use this to fake distributions).
        entry_points: load the ``tetrarch`` entry points of installed distributions.
        builtins: register core's builtin backends (the default policy always is).
        strict: raise on any plugin load error; defaults to the ``plugins_strict`` setting
            (``TETRARCH_PLUGINS_STRICT``).

    Plugins named by the ``disable_plugins`` setting (``TETRARCH_DISABLE_PLUGINS``) are
    skipped; both settings are read here, once.

    Raises:
        PluginLoadError: ``strict`` and a plugin failed to load.
        ValueError: ``TETRARCH_PLUGINS_STRICT`` holds no boolean.
    """

    def __init__(
        self,
        *,
        plugins: Iterable[PluginSource] = (),
        entry_points: bool = True,
        builtins: bool = True,
        strict: bool | None = None,
    ) -> None:
        self._strict = PLUGINS_STRICT() if strict is None else strict
        self._pm = pluggy.PluginManager(PROJECT)
        self._pm.add_hookspecs(_hookspecs)
        self._lock = threading.RLock()
        self._rows: dict[BackendKind, list[BackendStatus]] = {}  # computed per kind, on first use
        self._rows_generation = -1  # the config probe generation self._rows were computed under
        self._instances: dict[tuple[BackendKind, str], object] = {}
        disabled = _disabled_plugins()
        version = _core_version()
        core: list[PluginSource] = [PluginSource(DefaultPolicy(), "policy", _CORE, version)]
        if builtins:
            core.insert(0, PluginSource(BuiltinBackends(), "builtin", _CORE, version))
        records = load_sources(self._pm, core, disabled=frozenset(), strict=True)
        if entry_points:
            records += load_entry_points(self._pm, disabled=disabled, strict=self._strict)
        records += load_sources(self._pm, plugins, disabled=disabled, strict=self._strict)
        self._records: tuple[PluginRecord, ...] = tuple(records)

    # ---------------------------------------------------------------- inspection

    @property
    def plugin_manager(self) -> pluggy.PluginManager:
        """The underlying pluggy manager (broken plugins are not registered in it)."""
        return self._pm

    def plugins(self) -> list[PluginRecord]:
        """Every plugin seen (builtins, entry points, injected) and how loading went."""
        return list(self._records)

    def statuses(self, kind: BackendKind | None = None) -> list[BackendStatus]:
        """One row per backend (of ``kind``, or all), sorted by kind then name.

        Probes run once, on the first call, and their answers are kept until
        :func:`~tetrarch.configure` changes a setting a probe reads (e.g. ``efa_provider``);
        build a new registry (:func:`reset_registry`) to probe again after changing
        environment variables. Never raises for a plugin's fault: broken plugins and
        raising probes become rows.
        """
        # by kind value, as the rows of each kind are sorted: their concatenation is (kind, name, distribution) order
        kinds = sorted(BackendKind, key=lambda k: k.value) if kind is None else [BackendKind(kind)]
        generation = probe_generation()
        with self._lock:
            if self._rows_generation != generation:
                self._rows = {}
                self._rows_generation = generation
            missing = [k for k in kinds if k not in self._rows]
            if missing:  # only the kinds asked for are probed (a proc picking its transport probes no RDMA)
                rows = self._compute_rows(frozenset(missing))
                for k in missing:
                    self._rows[k] = [r for r in rows if r.kind is k]
            return [r for k in kinds for r in self._rows[k]]  # selection asks per transfer: no re-sort

    def status(self, kind: BackendKind, name: str) -> BackendStatus:
        """The row of one backend (the first one of a conflict).

        Raises:
            BackendNotFound: no plugin provides it and it is no known first-party one.
        """
        kind = BackendKind(kind)
        rows = self._rows_named(kind, name)
        if not rows:
            raise no_such_backend(kind, name, "status()", self.statuses(kind), self._records)
        return rows[0]

    def _rows_named(self, kind: BackendKind, name: str) -> list[BackendStatus]:
        return [r for r in self.statuses(kind) if r.name == name]

    def _compute_rows(self, kinds: frozenset[BackendKind]) -> list[BackendStatus]:
        providers: dict[tuple[BackendKind, str], list[tuple[BackendSpec, PluginRecord]]] = {}
        for rec in self._records:
            for spec in rec.specs:
                if spec.kind in kinds:
                    providers.setdefault((spec.kind, spec.name), []).append((spec, rec))
        rows: list[BackendStatus] = []
        for (kind, name), provs in providers.items():
            if len(provs) > 1:
                rows.extend(self._conflict_rows(kind, name, provs))
                continue
            spec, rec = provs[0]
            rows.append(spec_row(spec, rec.distribution, rec.version))
        seen = set(providers)
        for rec in self._records:  # first-party distributions that did not load
            if rec.state is PluginState.LOADED:
                continue
            for known in known_for_distribution(rec.distribution):
                if known.kind not in kinds or (known.kind, known.name) in seen:
                    continue
                seen.add((known.kind, known.name))
                rows.append(BackendStatus(known.kind, known.name, STATUS_OF_STATE[rec.state], rec.distribution,
                                          rec.version, rec.reason, rec.remedy))
        for (kind, name), known in KNOWN_BACKENDS.items():
            if kind not in kinds or (kind, name) in seen:
                continue
            absent = f"{known.distribution} is not installed"
            if known.implemented:
                rows.append(BackendStatus(kind, name, Status.NOT_INSTALLED, known.distribution, "", absent,
                                          known.hint))
            else:  # never tell users to install what cannot run
                rows.append(BackendStatus(kind, name, Status.NOT_IMPLEMENTED, known.distribution, "",
                                          not_implemented_reason(kind, name, absent)))
        rows.sort(key=lambda r: (r.kind.value, r.name, r.distribution))
        return with_alternatives(rows)

    @staticmethod
    def _conflict_rows(
        kind: BackendKind, name: str, provs: list[tuple[BackendSpec, PluginRecord]]
    ) -> list[BackendStatus]:
        who = " and ".join(f"{rec.distribution} {rec.version}" for _, rec in provs)
        reason = f"{kind.value} backend {name!r} is registered by both {who}"
        blockable = sorted({normalize_dist(rec.distribution) for _, rec in provs} - {_CORE})
        if len({rec.distribution for _, rec in provs}) == 1:
            hint = f"{provs[0][1].distribution} registers it twice; report the bug, or uninstall it"
        elif blockable:
            hint = "block one with " + " or ".join(f"{DISABLE_ENV}={d}" for d in blockable) + ", or uninstall it"
        else:
            hint = "uninstall one of them"
        return [BackendStatus(kind, name, Status.CONFLICT, rec.distribution, rec.version, reason, hint, spec)
                for spec, rec in provs]

    # ---------------------------------------------------------------- selection

    @staticmethod
    def strip_scheme(address: str) -> str:
        """``"zmq+tcp://h:1"`` -> ``"tcp://h:1"``; plain addresses come back unchanged.

        Raises:
            ValueError: the address has no ``scheme://`` prefix.
        """
        _, scheme, rest = split_address(address)
        return f"{scheme}://{rest}"

    def select(
        self,
        kind: BackendKind,
        name: str | None = None,
        *,
        address: str | None = None,
        request: SelectionRequest | Mapping[str, object] | None = None,
        among: Iterable[str] | None = None,
    ) -> BackendSpec:
        """Choose the backend of ``kind`` to use.

        Order: ``name`` > the kind's setting (``transport``, ``rdma_backend``,
        ``allocator``: a value set with ``tetrarch.configure`` or else the environment
        variable ``TETRARCH_TRANSPORT``, ``TETRARCH_RDMA_BACKEND``, ``TETRARCH_ALLOCATOR``)
        > the backend named by a qualified ``address`` (``zmq+tcp://...``) > the ``tetrarch_select_backend``
        hook over the available backends (for a plain ``tcp://`` / ``ipc://`` address,
        only those serving its scheme). Core's policy picks the highest priority with
        every capability in ``request.require``. An explicit choice is never
        replaced by another backend. An RDMA choice that falls back to a core backend
        while a hardware backend is installed warns once per process (or raises when
        ``request.allow_fallback`` is False or ``TETRARCH_RDMA_FALLBACK=0``).
        ``request`` is a :class:`SelectionRequest` for ``kind`` (None: the default one; a
        mapping of plugin API 1.1 with keys named as its fields is turned into one); the
        registry fills its ``scheme`` from a plain ``address``.
        ``among`` limits an automatic choice to those names (an RDMA transfer: the
        backends both sides have); an explicit choice is not limited by it. A backend
        available *on request* only is passed over unless ``among`` names it (a buffer's
        owner registered with it by name).

        Raises:
            BackendNotFound: the chosen name is not installed (the message lists the
                installed backends and the ``pip install "tetrarch[X]"`` hint), or no
                installed transport serves the address's scheme.
            BackendUnavailable: the chosen backend is not implemented, unavailable,
                broken, disabled or in conflict, or no backend of the kind is available.
            ValueError: a malformed address, an address for a non-transport kind, an
                address contradicting the explicit choice or the request's scheme, a request
                for another kind or with a key that is no field, or a setting's environment
                variable holding no valid value.
            TypeError: a request's field of the wrong type.

        Errors of the backend (not of the arguments) carry ``kind``, ``name`` (None for an
        automatic choice), ``reason`` and ``remedy`` as fields.
        """
        kind = BackendKind(kind)
        return self._select(kind, name, address, SelectionRequest.of(kind, request), None, among)

    def explain(
        self,
        kind: BackendKind,
        name: str | None = None,
        *,
        address: str | None = None,
        request: SelectionRequest | Mapping[str, object] | None = None,
    ) -> Explanation:
        """How :meth:`select` decides for these arguments, rule by rule, and what it selects.

        Runs the same code as :meth:`select` (recording each rule it looks at); a
        selection error becomes the explanation's ``error`` instead of being raised.

        Raises:
            ValueError: ``kind`` is no backend kind, or ``request`` is no request for it (as :meth:`select`).
            TypeError: as :meth:`select`.
        """
        kind = BackendKind(kind)
        req = SelectionRequest.of(kind, request)
        trace = Trace()
        winner: BackendSpec | None = None
        error = ""
        try:
            winner = self._select(kind, name, address, req, trace)
        except (BackendNotFound, BackendUnavailable, ValueError, TypeError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        row = next((r for r in self.statuses(kind) if winner is not None and r.spec is winner), None)
        origin = f"{row.distribution} {row.version}".strip() if row else ""
        return Explanation(kind, address, req, tuple(self.statuses(kind)), tuple(trace.steps), winner, origin,
                           error)

    def _select(self, kind: BackendKind, name: str | None, address: str | None, req: SelectionRequest,
                trace: Trace | None, among: Iterable[str] | None = None) -> BackendSpec:
        note = trace.note if trace is not None else (lambda *_a, **_k: None)
        addr_backend: str | None = None
        scheme: str | None = None
        if address is not None:
            if kind is not BackendKind.TRANSPORT:
                raise ArgumentError(f"an address only selects a transport, not a {kind.value} backend")
            addr_backend, scheme, _ = split_address(address)
            if req.scheme is not None and req.scheme != scheme:
                raise ArgumentError(f"address {address!r} is of scheme {scheme!r} but the request's is {req.scheme!r}")
            req = dataclasses.replace(req, scheme=scheme)
        scheme = req.scheme
        chosen: str | None
        if name:
            chosen, source = name, f"name={name!r}"
            note("explicit", f"name={name!r} given", True)
        else:
            note("explicit", "none given")
            chosen, source = _chosen_by_setting(SETTING_BY_KIND[kind])
            setting = SETTING_BY_KIND[kind]
            note("setting", f"{source} chooses {chosen!r}" if chosen else
                 f"not set (neither configure({setting.key}=...) nor {setting.env})", bool(chosen))
        if addr_backend is not None:
            if chosen is None:
                chosen, source = addr_backend, f"address {address!r}"
                note("address", f"{address!r} is qualified: it names {addr_backend!r}", True)
            elif chosen != addr_backend:
                raise ArgumentError(f"address {address!r} names transport {addr_backend!r} but {source} chose "
                                    f"{chosen!r}")
            else:
                note("address", f"{address!r} names {addr_backend!r} too: it agrees")
        elif scheme is not None:
            note("address", f"plain {scheme}:// address: " + (f"{chosen!r} must serve it" if chosen else
                 f"only transports serving {scheme}:// are candidates"))
        elif chosen is None:
            note("address", "no address given" if kind is BackendKind.TRANSPORT else "applies to transports only")
        if chosen is None:
            return self._auto(kind, scheme, req, None if among is None else frozenset(among), trace)
        spec = self._named(kind, chosen, source)
        if scheme is not None and scheme not in spec.schemes:
            served = ", ".join(f"{s}://" for s in spec.schemes) or "nothing"
            raise ArgumentError(f"transport {chosen!r} ({source}) cannot serve {address or scheme + '://'!r}; it "
                                f"serves {served}")
        return spec

    def _named(self, kind: BackendKind, name: str, source: str) -> BackendSpec:
        rows = self._rows_named(kind, name)
        if not rows or is_absent(rows[0]):
            raise no_such_backend(kind, name, source, self.statuses(kind), self._records)
        row = rows[0]
        if row.status is Status.AVAILABLE and row.spec is not None:
            return row.spec
        raise not_usable(row, source, self.statuses(kind))

    def _auto(self, kind: BackendKind, scheme: str | None, request: SelectionRequest,
              among: frozenset[str] | None = None, trace: Trace | None = None) -> BackendSpec:
        rows = [r for r in self.statuses(kind) if not is_absent(r)]
        if among is not None:
            rows = [r for r in rows if r.name in among or r.distribution != _CORE]  # skipped ones still count
        what = f"{kind.value} backend"
        if scheme is not None:
            rows = [r for r in rows if r.spec is not None and scheme in r.spec.schemes]
            what = f"transport for {scheme}:// addresses"
            if not rows:
                raise no_transport_for(scheme, self.statuses(kind))
        candidates = [r.spec for r in rows if r.status is Status.AVAILABLE and r.spec is not None
                      and (among is None or r.name in among) and (not r.on_request or among is not None)]
        if trace is not None and among is None and any(r.on_request for r in rows):
            trace.note("hook", "available on request only, so passed over (select it by name or setting): "
                       + ", ".join(r.name for r in rows if r.on_request))
        chosen = None
        if candidates:
            chosen = self._pm.hook.tetrarch_select_backend(kind=kind, candidates=candidates, request=request)
            if trace is not None:
                trace_hooks(trace, self._pm.hook.tetrarch_select_backend, kind, candidates, request, chosen)
        elif trace is not None:
            trace.note("hook", "no available candidate to choose from")
        if chosen is None:
            reason = f"no {what} is available"
            if candidates and request.require:
                reason += f" with capabilities {capability_names(request.require)}"
            message = reason + ": " + ("; ".join(_describe(r) for r in rows) or "none is installed")
            installs = [r.remedy for r in self.statuses(kind) if r.status is Status.NOT_INSTALLED]
            if installs:
                message += ". Install one: " + " or ".join(installs)
            fixes = [f"{r.name}: {r.remedy}" for r in rows if r.remedy and r.status is not Status.AVAILABLE]
            remedy = "; ".join(fixes + (["or install one: " + " or ".join(installs)] if installs else []))
            raise BackendUnavailable(message, kind=kind, reason=reason, remedy=remedy)
        if not any(chosen is c for c in candidates):
            raise BackendUnavailable(f"a tetrarch_select_backend hook returned {chosen!r}, which is not an available "
                                     f"candidate", kind=kind, name=getattr(chosen, "name", None),
                                     reason="a tetrarch_select_backend hook returned no available candidate",
                                     remedy="a bug in the plugin of that hook; report it, or disable it "
                                            f"({DISABLE_ENV}=<its distribution>)")
        if kind is BackendKind.RDMA:
            check_rdma_fallback(chosen, rows, request)
        return chosen

    # ---------------------------------------------------------------- creation

    def create(
        self,
        kind: BackendKind,
        name: str | None = None,
        *,
        address: str | None = None,
        request: SelectionRequest | Mapping[str, object] | None = None,
        fresh: bool = False,
    ) -> object:
        """Select a backend (see :meth:`select`) and return its instance.

        The factory is imported and called with no arguments once per (kind, name);
        later calls return the same object (one transport per process). ``fresh``: call
        the factory again for an instance of the caller's own, not kept here (a router
        keyed with another secret needs one; the caller closes it).

        Raises:
            BackendNotFound, BackendUnavailable, ValueError: as :meth:`select`;
                BackendUnavailable also when the factory cannot be imported.
            Exception: whatever the factory raises when called (e.g. NotImplementedError).
        """
        spec = self.select(kind, name, address=address, request=request)
        if fresh:
            return self._import_factory(spec)()
        key = (spec.kind, spec.name)
        with self._lock:
            instance = self._instances.get(key)
            if instance is None:
                instance = self._import_factory(spec)()
                self._instances[key] = instance
        return instance

    def get_transport(self, name: str | None = None) -> Transport:
        """The transport to use: :meth:`create` for :attr:`BackendKind.TRANSPORT`, typed.

        ``name`` chooses it; without one, the ``transport`` setting, then priority decide
        (see :meth:`select`). One instance per process and backend.

        Raises:
            BackendNotFound: no transport of that name (lists the installed ones and the
                ``pip install "tetrarch[X]"`` hint of a first-party one).
            BackendUnavailable: as :meth:`create`.
            TypeError: the backend's factory built something that is no ``Transport``.
            Exception: whatever the factory raises (e.g. NotImplementedError).
        """
        from .._transport._base import Transport

        return cast("Transport", self._typed(BackendKind.TRANSPORT, name, Transport))

    def get_allocator(self, name: str | None = None) -> Allocator:
        """The allocator to use: :meth:`create` for :attr:`BackendKind.ALLOCATOR`, typed.

        ``name`` chooses it; without one, the ``allocator`` setting, then priority decide.
        RDMA backends are selected per transfer by ``tetrarch.rdma`` (``tetrarch._rdma``),
        which creates them with :meth:`create`.

        Raises:
            BackendNotFound, BackendUnavailable, TypeError, Exception: as
                :meth:`get_transport`, for an allocator.
        """
        from .._runtime.plumbing._alloc import Allocator

        return cast("Allocator", self._typed(BackendKind.ALLOCATOR, name, Allocator))

    def _typed(self, kind: BackendKind, name: str | None, interface: type) -> object:
        instance = self.create(kind, name)
        if not isinstance(instance, interface):
            with self._lock:
                backend = next((n for (k, n), obj in self._instances.items() if obj is instance), name)
            raise ArgumentTypeError(
                f"{kind.value} backend {backend!r} built a {type(instance).__module__}.{type(instance).__qualname__}, "
                f"which is no tetrarch.plugins.{interface.__name__}; a bug in its plugin"
            )
        return instance

    def _import_factory(self, spec: BackendSpec) -> Any:
        row = next((r for r in self.statuses(spec.kind) if r.spec is spec), None)
        origin = f"{row.distribution} {row.version}" if row else "unknown distribution"
        module_name, _, attr = spec.factory.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except Exception as exc:
            reason = f"cannot import the factory {spec.factory!r}: {type(exc).__name__}: {exc}"
            raise BackendUnavailable(
                f"cannot import the factory {spec.factory!r} of {spec.kind.value} backend {spec.name!r} "
                f"(plugin from {origin}): {type(exc).__name__}: {exc}", kind=spec.kind, name=spec.name,
                reason=reason, remedy=f"reinstall {origin.rsplit(' ', 1)[0]} (a bug in it if that does not help)",
            ) from exc
        return obj

    def close(self) -> None:
        """Close every instance :meth:`create` made (those with a ``close`` method)."""
        with self._lock:
            instances, self._instances = list(self._instances.values()), {}
        for instance in instances:
            closer = getattr(instance, "close", None)
            if callable(closer):
                closer()


_registry: Registry | None = None
_registry_lock = threading.Lock()


def get_registry() -> Registry:
    """The process-wide registry, loaded on first use (thread safe).

    Raises:
        PluginLoadError: ``TETRARCH_PLUGINS_STRICT=1`` and a plugin failed to load
            (the next call tries again).
    """
    global _registry
    registry = _registry
    if registry is None:
        with _registry_lock:
            if _registry is None:
                _registry = Registry()
            registry = _registry
    return registry


def get_transport(name: str | None = None) -> Transport:
    """The process-wide registry's transport: :meth:`Registry.get_transport`.

    Raises:
        PluginLoadError: as :func:`get_registry`.
        BackendNotFound, BackendUnavailable, TypeError, Exception: as :meth:`Registry.get_transport`.
    """
    return get_registry().get_transport(name)


def get_allocator(name: str | None = None) -> Allocator:
    """The process-wide registry's allocator: :meth:`Registry.get_allocator`.

    RDMA backends are selected per transfer by ``tetrarch.rdma`` (see docs/rdma.md).

    Raises:
        PluginLoadError: as :func:`get_registry`.
        BackendNotFound, BackendUnavailable, TypeError, Exception: as :meth:`Registry.get_allocator`.
    """
    return get_registry().get_allocator(name)


def reset_registry(*, close: bool = False) -> None:
    """Forget the process-wide registry (tests; after changing plugin env vars).

    With ``close``, instances it created are closed first.
    """
    global _registry
    with _registry_lock:
        old, _registry = _registry, None
    if close and old is not None:
        old.close()
