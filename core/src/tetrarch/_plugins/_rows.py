"""How a backend's row in ``tetrarch plugins`` reads: the most important fact first.

Order of importance: a backend whose code is not written yet is ``not implemented``,
whatever its probe finds (a missing library or tool is then only context, and its
remedy is dropped: nobody should install hardware tools for a backend that cannot
run); a disabled plugin is ``disabled``; otherwise the probe decides. Remedies name only
backends that exist and are available here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ._specs import BackendKind, BackendSpec, BackendStatus, Capability, ProbeResult, Status

__all__ = ["describe", "is_absent", "kind_noun", "not_implemented_reason", "run_probe", "spec_row", "with_alternatives"]

_NOUN = {BackendKind.TRANSPORT: "transport", BackendKind.RDMA: "RDMA backend", BackendKind.ALLOCATOR: "allocator"}


def kind_noun(kind: BackendKind) -> str:
    """``"transport"``, ``"RDMA backend"`` or ``"allocator"``."""
    return _NOUN[BackendKind(kind)]


def run_probe(spec: BackendSpec) -> ProbeResult:
    """The spec's probe answer; a probe that raises or returns garbage becomes a "no"."""
    if spec.probe is None:
        return ProbeResult.yes()
    try:
        result = spec.probe()
    except Exception as exc:  # noqa: BLE001 - a probe never takes the registry down
        return ProbeResult.no(f"its probe raised {type(exc).__name__}: {exc}", "a bug in the plugin; report it")
    if not isinstance(result, ProbeResult):
        return ProbeResult.no(f"its probe returned {result!r}, not a ProbeResult", "a bug in the plugin; report it")
    return result


def not_implemented_reason(kind: BackendKind, name: str, finding: str = "", *, found: bool = False) -> str:
    """``"the zmq transport is not implemented yet (found here: pyzmq 27.3.0)"``.

    ``finding`` is what the probe (or the registry) saw, kept as context after the main
    fact: ``found`` when it is something present, else something missing
    (``"... not implemented yet (also: sbatch and srun not on PATH)"``).
    """
    text = f"the {name} {kind_noun(kind)} is not implemented yet"
    if finding:
        text += f" (found here: {finding})" if found else f" (also: {finding})"
    return text


def spec_row(spec: BackendSpec, distribution: str, version: str) -> BackendStatus:
    """The row of a backend its plugin declared (probed once, here)."""
    probe = run_probe(spec)
    if not spec.implemented:
        reason = not_implemented_reason(spec.kind, spec.name, probe.reason, found=probe.ok)
        return BackendStatus(spec.kind, spec.name, Status.NOT_IMPLEMENTED, distribution, version, reason, "", spec)
    status = Status.AVAILABLE if probe.ok else Status.UNAVAILABLE
    return BackendStatus(spec.kind, spec.name, status, distribution, version, probe.reason, probe.remedy, spec,
                         probe.ok and probe.on_request)


def _alternatives(rows: Sequence[BackendStatus], kind: BackendKind, name: str) -> str:
    found = {r.name: r for r in rows if r.kind is kind and r.status is Status.AVAILABLE and r.name != name}
    noun = kind_noun(kind)
    if not found:
        return f"no other {noun} is available here"
    quoted = [repr(n) + _scope(found[n]) for n in sorted(found)]
    listing = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
    return f"use the {listing} {noun} instead"


def _scope(row: BackendStatus) -> str:
    """`` (same host only)`` for an alternative that cannot serve peers on other hosts."""
    caps = row.spec.capabilities if row.spec is not None else frozenset()
    return " (same host only)" if Capability.SAME_HOST in caps and Capability.MULTI_HOST not in caps else ""


def with_alternatives(rows: list[BackendStatus]) -> list[BackendStatus]:
    """``rows`` with the remedy of each ``not implemented`` row naming the available backends of its kind."""
    return [replace(r, remedy=_alternatives(rows, r.kind, r.name)) if r.status is Status.NOT_IMPLEMENTED else r
            for r in rows]


def describe(row: BackendStatus) -> str:
    """``"zmq (tetrarch-transport-zmq 0.1.0): the zmq transport is not implemented yet (...)"``, one line."""
    text = f"{row.name} ({row.distribution}"
    text += f" {row.version}): " if row.version else "): "
    if row.status is Status.NOT_IMPLEMENTED:
        return text + row.reason
    return text + row.shown + (f", {row.reason}" if row.reason else "")


def is_absent(row: BackendStatus) -> bool:
    """Whether the row stands for a first-party backend whose distribution is not installed
    (``not installed``, or ``not implemented`` with no plugin behind it)."""
    return row.status is Status.NOT_INSTALLED or (row.status is Status.NOT_IMPLEMENTED and row.spec is None)
