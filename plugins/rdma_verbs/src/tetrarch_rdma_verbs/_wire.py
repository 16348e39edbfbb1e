"""What the verbs backend puts in a descriptor and sends to connect queue pairs (builtins only).

Both arrive from peers and are untrusted: :func:`parse_context` and :func:`parse_endpoint`
check every field and raise :class:`VerbsError` naming the bad one. The NIC itself bounds
what a context can reach (its ``rkey`` covers only the registered range).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._status import VerbsError

__all__ = ["VERSION", "Endpoint", "RegionContext", "parse_context", "parse_endpoint"]

VERSION = 1


def _field(data: dict[str, Any], key: str, kind: type, what: str) -> Any:
    value = data.get(key)
    if type(value) is not kind:
        raise VerbsError(f"{what}: field {key!r} is {value!r}, expected {kind.__name__}; the handle was not made by "
                         f"this version of tetrarch's verbs backend (or is corrupted): ask its owner for a fresh one")
    if isinstance(value, int) and value < 0:
        raise VerbsError(f"{what}: field {key!r} is negative ({value})")
    return value


def _check(data: object, what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise VerbsError(f"{what}: expected a dict, got {type(data).__name__}")
    if data.get("v") != VERSION:
        raise VerbsError(f"{what}: version {data.get('v')!r}, this backend speaks {VERSION}; run the same tetrarch "
                         f"version on both sides")
    return data


@dataclass(frozen=True, slots=True)
class RegionContext:
    """A registered region: the address the NIC knows it by (``iova``) and its remote key."""

    iova: int
    rkey: int
    nbytes: int

    def to_builtins(self) -> dict[str, Any]:
        return {"v": VERSION, "iova": self.iova, "rkey": self.rkey, "len": self.nbytes}


def parse_context(data: object) -> RegionContext:
    """A descriptor's verbs context, checked.

    Raises:
        VerbsError: not made by this backend's version, or a field of the wrong type.
    """
    what = "the RDMABuffer's verbs context"
    d = _check(data, what)
    return RegionContext(_field(d, "iova", int, what), _field(d, "rkey", int, what), _field(d, "len", int, what))


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One side of an RC queue pair connection (what the two sides exchange through ``host.call``)."""

    gid: bytes  # 16 bytes; all zero on InfiniBand without a GRH
    lid: int
    qpn: int
    psn: int
    mtu: int  # enum ibv_mtu
    port: int

    def to_builtins(self) -> dict[str, Any]:
        return {"v": VERSION, "op": "connect", "gid": self.gid, "lid": self.lid, "qpn": self.qpn,
                "psn": self.psn, "mtu": self.mtu, "port": self.port}


def parse_endpoint(data: object) -> Endpoint:
    """A peer's queue pair endpoint, checked.

    Raises:
        VerbsError: a field missing, of the wrong type or out of range.
    """
    what = "the peer's queue pair endpoint"
    d = _check(data, what)
    gid = _field(d, "gid", bytes, what)
    if len(gid) != 16:
        raise VerbsError(f"{what}: gid has {len(gid)} bytes, expected 16")
    ep = Endpoint(gid, _field(d, "lid", int, what), _field(d, "qpn", int, what), _field(d, "psn", int, what) & 0xFFFFFF,
                  _field(d, "mtu", int, what), _field(d, "port", int, what))
    if ep.lid > 0xFFFF or ep.qpn > 0xFFFFFF or not 1 <= ep.mtu <= 5:
        raise VerbsError(f"{what}: lid, qpn or mtu out of range ({ep})")
    return ep
