"""Scenario: an allocator that spans hosts makes the client listen routably (fresh interpreter).

argv[1]: the transport to use (``tcp`` or ``ipc``). Prints one JSON line.
No process is started: the allocator records the request and refuses it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import tetrarch
from tetrarch._errors import AllocatorError
from tetrarch._runtime.meshes._proc_mesh import HostMesh, _start_hosts
from tetrarch._runtime.plumbing._alloc import Allocation, Allocator, AllocRequest
from tetrarch._runtime.plumbing._spawn import ExitInfo
from tetrarch._runtime.process._root import get_root
from tetrarch._runtime.values._shape import Extent, Shape


class RecordingAllocator(Allocator):
    name = "recording"
    spans_hosts = True

    def __init__(self) -> None:
        self.request: AllocRequest | None = None

    def _allocate(self, request: AllocRequest, on_exit: Callable[[int, ExitInfo], None]) -> Allocation:
        self.request = request
        raise AllocatorError("recorded; nothing started")


def main() -> int:
    root = get_root()
    before = root.router.address
    alloc = RecordingAllocator()
    out: dict[str, object] = {"before": before}
    try:
        _start_hosts(root, alloc, 1, HostMesh(Shape(Extent([], [])), None, owned=False))
    except tetrarch.TetrarchError as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["after"] = root.router.address
    if alloc.request is not None:
        env = alloc.request.agent.env
        out["client_addr"] = env.get("TETRARCH_CLIENT_ADDR")
        out["spans_hosts"] = env.get("TETRARCH_SPANS_HOSTS")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
