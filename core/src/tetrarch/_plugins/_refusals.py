"""The errors :meth:`Registry.select` raises, with their messages and fields.

Each message names the fix (the installed choices, the ``pip install "tetrarch[X]"`` of
a first-party backend, the remedy of a probe); the same facts go into the error's
``kind``, ``name``, ``reason`` and ``remedy``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._errors import BackendNotFound, BackendUnavailable
from ._explain import scheme_listing
from ._known import known_backend, known_for_distribution
from ._loader import PluginRecord, PluginState
from ._rows import is_absent, kind_noun
from ._specs import BackendKind, BackendStatus, Status

__all__ = ["installed", "no_such_backend", "no_transport_for", "not_usable"]


def installed(kind: BackendKind, rows: Sequence[BackendStatus]) -> str:
    """Every discoverable backend of ``kind`` (status, schemes) and how to install the absent first-party ones."""
    text = f"installed {kind.value} backends: " + scheme_listing([r for r in rows if not is_absent(r)])
    absent = [r for r in rows if r.status is Status.NOT_INSTALLED]
    if absent:
        text += "; not installed: " + ", ".join(f"{r.name} ({r.remedy})" for r in absent)
    return text


def no_such_backend(kind: BackendKind, name: str, source: str, rows: Sequence[BackendStatus],
                    records: Sequence[PluginRecord]) -> BackendNotFound:
    """No plugin provides ``name`` (``source``: who chose it); ``rows``: the kind's rows."""
    message = f"no {kind.value} backend named {name!r} (chosen by {source}); {installed(kind, rows)}"
    known = known_backend(kind, name)
    choices = ", ".join(r.name for r in rows if r.status is Status.AVAILABLE) or "none is available"
    if known is not None and not known.implemented:
        reason = f"the {name} {kind_noun(kind)} is not implemented yet (it is to come with {known.distribution})"
        remedy = f"choose an available {kind_noun(kind)} ({choices})"
        message += f". {name!r} is not implemented yet (it is to come with {known.distribution})"
    elif known is not None:
        reason, remedy = f"{known.distribution} is not installed", known.hint
        message += f". {name!r} comes with {known.distribution}: {known.hint}"
    else:
        reason = f"no installed plugin provides a {kind_noun(kind)} named {name!r}"
        remedy = f"install the plugin that provides it, or choose an available {kind_noun(kind)} ({choices})"
    unloaded = [p for p in records if p.state in (PluginState.BROKEN, PluginState.INCOMPATIBLE)
                and not known_for_distribution(p.distribution)]
    if unloaded:
        message += ". Plugins that could not be loaded (one may provide it): " + "; ".join(
            f"{p.name} ({p.distribution} {p.version}): {p.state.value}, {p.reason}" for p in unloaded
        )
    return BackendNotFound(message, kind=kind, name=name, reason=reason, remedy=remedy)


def not_usable(row: BackendStatus, source: str, rows: Sequence[BackendStatus]) -> BackendUnavailable:
    """The backend of ``row``, chosen by ``source``, is installed but cannot be used (never replaced)."""
    kind, name = row.kind, row.name
    where = f"{row.distribution} {row.version}".strip()
    message = f"{kind.value} backend {name!r} ({where}), chosen by {source}, "
    reason = row.reason or f"it is {row.status.value}"
    if row.status is Status.NOT_IMPLEMENTED:  # its remedy would repeat the list of available ones below
        message += f"cannot be used: {row.reason}"
    else:
        message += f"is {row.status.value}" + (f": {row.reason}" if row.reason else "")
        message += f"; {row.remedy}" if row.remedy else ""
        reason = f"{row.status.value}" + (f": {row.reason}" if row.reason else "")
    others = [r.name for r in rows if r.status is Status.AVAILABLE]
    message += ". An explicit choice is never replaced; available instead: " + (", ".join(others) or "none")
    remedy = row.remedy or (f"choose an available {kind_noun(kind)} ({', '.join(others)})" if others else "")
    return BackendUnavailable(message, kind=kind, name=name, reason=reason, remedy=remedy)


def no_transport_for(scheme: str, rows: Sequence[BackendStatus]) -> BackendNotFound:
    """No installed transport serves ``scheme://`` addresses."""
    kind = BackendKind.TRANSPORT
    served = sorted({s for r in rows if r.spec is not None and not is_absent(r) for s in r.spec.schemes})
    return BackendNotFound(
        f"no installed transport serves {scheme}:// addresses; " + installed(kind, rows), kind=kind, name=None,
        reason=f"no installed transport serves {scheme}:// addresses",
        remedy="use an address of a scheme served here (" + (", ".join(f"{s}://" for s in served) or "none")
        + "), or install a transport serving it",
    )
