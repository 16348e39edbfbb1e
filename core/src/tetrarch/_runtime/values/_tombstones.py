"""Why the actors of a process are gone, in bounded memory.

A late call to an actor that was stopped (or failed in ``__init__``) must still hear
*why* it is gone, not "no such actor". Keeping every reason forever grew a proc by
one entry per stopped actor (+4.5 MB over 20 000 spawn/stop cycles). So the most
recent reasons are kept verbatim, and older ones shrink to a generation number:
actor keys carry their spawner's pid and a per-spawner counter (``name-pid-n-tag``,
see ``_proc_mesh._uid``), so remembering the highest counter evicted per spawner
answers "was stopped" for every older key in O(spawners) memory.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["Tombstones"]


class Tombstones:
    """``key -> why the actor is gone``: recent reasons verbatim, older ones as generations."""

    __slots__ = ("_evicted", "_limit", "_recent")

    def __init__(self, limit: int = 4096) -> None:
        self._limit = limit
        self._recent: OrderedDict[str, str] = OrderedDict()
        self._evicted: dict[str, int] = {}  # spawner pid -> highest counter whose reason was dropped

    def __setitem__(self, key: str, why: str) -> None:
        self._recent[key] = why
        self._recent.move_to_end(key)
        while len(self._recent) > self._limit:
            old, _ = self._recent.popitem(last=False)
            parsed = _parse(old)
            if parsed is not None:
                _name, pid, n = parsed
                if n > self._evicted.get(pid, -1):
                    self._evicted[pid] = n

    def get(self, key: str) -> str | None:
        """Why the actor ``key`` is gone, or None if this process never knew it."""
        why = self._recent.get(key)
        if why is not None:
            return why
        parsed = _parse(key)
        if parsed is not None:
            name, pid, n = parsed
            if n <= self._evicted.get(pid, -1):
                return f"the actor {name} ({key}) was stopped (an old actor: its exact reason was pruned)"
        return None

    def __len__(self) -> int:
        return len(self._recent)


def _parse(key: str) -> tuple[str, str, int] | None:
    """``(name, spawner pid, counter)`` of a key made by ``_proc_mesh._uid``, else None."""
    parts = key.rsplit("-", 3)
    if len(parts) != 4 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return parts[0], parts[1], int(parts[2])
