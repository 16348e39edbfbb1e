"""The decision walk of :meth:`Registry.select`, as ``tetrarch plugins --explain KIND [ADDRESS]`` prints it.

:meth:`Registry.select` records each rule it looks at into a :class:`Trace` when it is
given one (``Registry.explain``), so the walk printed is the code path that selects,
not a second implementation of the rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._request import SelectionRequest, capability_names
from ._rows import is_absent
from ._specs import BackendKind, BackendSpec, BackendStatus, Status

__all__ = ["RULES", "Explanation", "Step", "Trace", "scheme_listing", "trace_hooks"]

#: The rules in the order :meth:`Registry.select` applies them (docs/plugins.md §4).
RULES: Mapping[str, str] = {
    "explicit": "1. explicit argument",
    "setting": "2. setting (configure / env)",
    "address": "3. address scheme",
    "hook": "4. policy hooks",
    "priority": "5. priority (core's policy)",
}


@dataclass(frozen=True, slots=True)
class Step:
    """One rule as the selection saw it: ``decided`` when this rule chose the backend."""

    rule: str  #: a key of :data:`RULES`
    text: str
    decided: bool = False


@dataclass(slots=True)
class Trace:
    """What :meth:`Registry.select` appends to while it decides (explain mode)."""

    steps: list[Step] = field(default_factory=list)

    def note(self, rule: str, text: str, decided: bool = False) -> None:
        self.steps.append(Step(rule, text, decided))


def trace_hooks(trace: Trace, hook: Any, kind: BackendKind, candidates: Sequence[BackendSpec],
                request: SelectionRequest, chosen: BackendSpec | None) -> None:
    """Note which ``tetrarch_select_backend`` implementation returned ``chosen``.

    ``hook`` is the pluggy hook caller; its implementations are asked one by one in the
    order pluggy calls them (policy hooks are pure), core's default policy last.
    """
    from ._builtin import DefaultPolicy

    names = ", ".join(f"{c.name} (priority {c.priority})" for c in candidates)
    args = {"kind": kind, "candidates": candidates, "request": request}
    deferred = []
    for impl in reversed(hook.get_hookimpls()):
        if not isinstance(impl.plugin, DefaultPolicy):
            if impl.function(*[args[a] for a in impl.argnames]) is None:
                deferred.append(impl.plugin_name)
                continue
            trace.note("hook", f"plugin {impl.plugin_name!r} chose {chosen.name if chosen else None!r} among {names}",
                       True)
            return
        trace.note("hook", "no plugin hook chose" + (f" ({', '.join(deferred)} deferred)" if deferred else ""))
        require = capability_names(request.require)
        trace.note("priority", f"highest priority among {names}" + (f" having {require}" if require else "")
                   + (f": {chosen.name!r}" if chosen else ": none qualifies"), chosen is not None)
        return


def scheme_listing(rows: Sequence[BackendStatus]) -> str:
    """``"ipc (available; ipc://), tcp (available; tcp://), zmq (not implemented)"``: every discoverable
    backend of the rows with its status and, for transports, the schemes it serves."""
    parts = []
    for r in rows:
        schemes = ", ".join(f"{s}://" for s in r.spec.schemes) if r.spec is not None else ""
        parts.append(f"{r.name} ({r.shown}" + (f"; {schemes})" if schemes else ")"))
    return ", ".join(parts) or "none"


@dataclass(frozen=True, slots=True)
class Explanation:
    """Which backend of ``kind`` is selected here, and why (``Registry.explain``)."""

    kind: BackendKind
    address: str | None
    request: SelectionRequest
    rows: tuple[BackendStatus, ...]  #: every backend of the kind, installed or not
    steps: tuple[Step, ...]
    winner: BackendSpec | None
    winner_origin: str  #: ``"tetrarch 0.1.0"``: the distribution that provides the winner
    error: str  #: ``"BackendNotFound: ..."`` when no backend is selected, else empty

    def as_dict(self) -> dict[str, object]:
        """A JSON-ready form (``tetrarch plugins --explain ... --json``)."""
        return {
            "kind": self.kind.value,
            "address": self.address,
            "request": self.request.asked(),
            "backends": [{"backend": r.name, "status": r.status.value, "distribution": r.distribution,
                          "priority": r.spec.priority if r.spec else None,
                          "schemes": list(r.spec.schemes) if r.spec else [], "reason": r.reason} for r in self.rows],
            "steps": [{"rule": RULES[s.rule], "text": s.text, "decided": s.decided} for s in self.steps],
            "winner": self.winner.name if self.winner else None,
            "origin": self.winner_origin,
            "error": self.error,
        }

    def render(self) -> str:
        """The text ``tetrarch plugins --explain`` prints."""
        what = f"{self.kind.value} backend" + (f" for {self.address}" if self.address else "")
        asked = self.request.asked()
        lines = [f"selecting the {what}" + (f", request {asked}" if asked else "") + ":", "",
                 "backends:"]
        for r in self.rows:
            prio = f"priority {r.spec.priority}" if r.spec is not None else ""
            schemes = " ".join(f"{s}://" for s in r.spec.schemes) if r.spec is not None else ""
            note = "" if r.status is Status.AVAILABLE or is_absent(r) else r.reason
            if is_absent(r):
                note = r.remedy or r.reason
            cells = [r.name, r.shown, prio, schemes, note]
            lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(cells, (10, 16, 12, 18, 0), strict=True)).rstrip())
        lines += ["", "decision (the first rule that decides wins):"]
        decided = False
        seen = {s.rule for s in self.steps}
        for step in self.steps:
            mark = "->" if step.decided else "  "
            lines.append(f"  {mark} {RULES[step.rule]:<30} {step.text}")
            decided = decided or step.decided
        if decided:
            for rule, label in RULES.items():
                if rule not in seen:
                    lines.append(f"     {label:<30} not consulted (an earlier rule decided)")
        lines.append("")
        if self.winner is not None:
            lines.append(f"selected: {self.winner.name} ({self.winner_origin})")
        else:
            lines.append(f"no backend selected: {self.error}")
        return "\n".join(lines)
