"""What the installed libfabric offers, found through ctypes (no compiler, no endpoint opened).

:func:`discover` asks a short-lived child (``python -m tetrarch_rdma_efa._discover``,
through :func:`tetrarch.plugins.probe_in_child`): initializing libfabric's providers
installs signal handlers (its ``shm`` provider catches SIGSEGV, SIGBUS, SIGINT and
SIGTERM to remove its shared memory), which would change how every process that merely
probed dies, e.g. a segfaulting proc reported as "exit code 1" instead of SIGSEGV.

``fi_getinfo`` and ``fi_version`` are ordinary exported functions, so the probe can list
the providers without the cffi binding; walking the ``fi_info`` list needs only the
leading fields of ``struct fi_info`` and ``struct fi_fabric_attr``, which are ABI-stable
since libfabric 1.0.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import json
from dataclasses import dataclass

from tetrarch.plugins import probe_in_child

__all__ = ["Providers", "discover", "discover_here"]

_FI_RMA = 1 << 2
_FI_READ = 1 << 8
_FI_WRITE = 1 << 9
_NEEDED = _FI_RMA | _FI_READ | _FI_WRITE
_FI_EP_RDM = 3
_FI_HMEM = 1 << 47


class _FabricAttr(ctypes.Structure):
    _fields_ = [("fabric", ctypes.c_void_p), ("name", ctypes.c_char_p), ("prov_name", ctypes.c_char_p),
                ("prov_version", ctypes.c_uint32), ("api_version", ctypes.c_uint32)]


class _EpAttr(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int)]


class _Info(ctypes.Structure):
    pass


_Info._fields_ = [
    ("next", ctypes.POINTER(_Info)), ("caps", ctypes.c_uint64), ("mode", ctypes.c_uint64),
    ("addr_format", ctypes.c_uint32), ("src_addrlen", ctypes.c_size_t), ("dest_addrlen", ctypes.c_size_t),
    ("src_addr", ctypes.c_void_p), ("dest_addr", ctypes.c_void_p), ("handle", ctypes.c_void_p),
    ("tx_attr", ctypes.c_void_p), ("rx_attr", ctypes.c_void_p), ("ep_attr", ctypes.POINTER(_EpAttr)),
    ("domain_attr", ctypes.c_void_p), ("fabric_attr", ctypes.POINTER(_FabricAttr)), ("nic", ctypes.c_void_p),
]


@dataclass(frozen=True, slots=True)
class Providers:
    """The libfabric found here: its file and version, and its providers.

    ``rma`` holds the providers with an RDM endpoint that does one-sided read and write
    (those the efa backend can use); ``other`` the rest; ``hmem`` those of ``rma`` that also
    move device memory (``FI_HMEM``: libfabric built with CUDA/ROCm support, and the GPU
    runtime found). ``error`` is set (and the rest empty) when the library is missing or
    ``fi_getinfo`` failed.
    """

    library: str = ""
    version: str = ""
    rma: tuple[str, ...] = ()
    other: tuple[str, ...] = ()
    error: str = ""
    hmem: tuple[str, ...] = ()


def discover_here() -> Providers:
    """Load libfabric with ctypes into this process and list its providers. Never raises."""
    name = ctypes.util.find_library("fabric")
    if name is None:
        return Providers(error="libfabric shared library not found (ctypes.util.find_library('fabric') returned None)")
    try:
        lib = ctypes.CDLL(name)
        lib.fi_version.restype = ctypes.c_uint32
        lib.fi_strerror.restype = ctypes.c_char_p
        version = lib.fi_version()
        info = ctypes.POINTER(_Info)()
        rc = lib.fi_getinfo(ctypes.c_uint32(version), None, None, ctypes.c_uint64(0), None, ctypes.byref(info))
    except (OSError, AttributeError) as exc:
        return Providers(library=name, error=f"cannot use libfabric ({name}): {exc}")
    text = f"{version >> 16}.{version & 0xFFFF}"
    if rc != 0:
        why = lib.fi_strerror(-rc).decode(errors="replace")
        return Providers(library=name, version=text, error=f"fi_getinfo found no provider: {why} ({rc})")
    rma: dict[str, None] = {}
    other: dict[str, None] = {}
    hmem: dict[str, None] = {}
    try:
        node = info
        while node:
            entry = node.contents
            prov = (entry.fabric_attr.contents.prov_name or b"?").decode(errors="replace")
            if entry.caps & _NEEDED == _NEEDED and entry.ep_attr and entry.ep_attr.contents.type == _FI_EP_RDM:
                rma[prov] = None
                if entry.caps & _FI_HMEM:
                    hmem[prov] = None
            else:
                other[prov] = None
            node = entry.next
    finally:
        lib.fi_freeinfo(info)
    return Providers(name, text, tuple(rma), tuple(p for p in other if p not in rma), hmem=tuple(hmem))


def discover() -> Providers:
    """:func:`discover_here`, run in a child process (this one's signal handlers stay as they are). Never raises."""
    found = probe_in_child("tetrarch_rdma_efa._discover")
    if "child_error" in found:
        return Providers(error=f"listing libfabric's providers failed: {found['child_error']}")
    return Providers(library=str(found.get("library", "")), version=str(found.get("version", "")),
                     rma=tuple(found.get("rma", ())), other=tuple(found.get("other", ())),
                     error=str(found.get("error", "")), hmem=tuple(found.get("hmem", ())))


if __name__ == "__main__":
    print(json.dumps(dataclasses.asdict(discover_here())))
