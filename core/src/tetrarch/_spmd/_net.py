"""Which network interface gloo uses in a group that spans hosts (``GLOO_SOCKET_IFNAME``).

Without ``GLOO_SOCKET_IFNAME``, torch's gloo backend (torch 2.13, ``ProcessGroupGloo``'s
``createDefaultDevice``) binds to the address the host name resolves to, and falls back to
loopback when it does not resolve ("Unable to resolve hostname to a (local) address. Using the
loopback address as fallback"). A node whose name is not in ``/etc/hosts`` or DNS then announces
127.0.0.1 to its peers, and ranks on other hosts fail with "connectFullMesh failed ... Connection
refused, remote=[127.0.0.1]"; a node whose name resolves to another network's address announces
that one. So when ``MASTER_ADDR`` is not a loopback address, each rank pins gloo to the interface
it reaches ``MASTER_ADDR`` through (found without sending a packet), unless the user chose one.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import socket
import sys

from .._transport._route import source_ip_toward

__all__ = ["GLOO_IFNAME", "interface_env", "interface_of"]

#: The variable torch's ``ProcessGroupGloo`` reads (a comma-separated list of interface names).
GLOO_IFNAME = "GLOO_SOCKET_IFNAME"

#: The value this process set itself; a later run recomputes it, a value the user set is kept.
_auto: dict[str, str] = {}

_IFF_UP = 0x1


class _Sockaddr(ctypes.Structure):  # Linux: sa_family is an unsigned short (no sa_len byte)
    _fields_ = [("sa_family", ctypes.c_ushort), ("sa_data", ctypes.c_ubyte * 14)]


class _Ifaddrs(ctypes.Structure):
    pass


_Ifaddrs._fields_ = [("ifa_next", ctypes.POINTER(_Ifaddrs)), ("ifa_name", ctypes.c_char_p),
                     ("ifa_flags", ctypes.c_uint), ("ifa_addr", ctypes.POINTER(_Sockaddr)),
                     ("ifa_netmask", ctypes.POINTER(_Sockaddr)), ("ifa_ifu", ctypes.POINTER(_Sockaddr)),
                     ("ifa_data", ctypes.c_void_p)]


def interface_of(ip: str) -> str | None:
    """The name of the up interface that holds the IPv4 address ``ip`` (as ``getifaddrs`` names it,
    which is what gloo matches ``GLOO_SOCKET_IFNAME`` against), else ``None`` (also off Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        want = socket.inet_aton(ip)
        libc = ctypes.CDLL(None, use_errno=True)
        head = ctypes.POINTER(_Ifaddrs)()
        if libc.getifaddrs(ctypes.byref(head)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    try:
        node = head
        while node:
            entry = node.contents
            addr = entry.ifa_addr
            if (addr and addr.contents.sa_family == socket.AF_INET and entry.ifa_flags & _IFF_UP
                    and bytes(addr.contents.sa_data[2:6]) == want and entry.ifa_name):
                return entry.ifa_name.decode(errors="replace")
            node = entry.ifa_next
        return None
    finally:
        libc.freeifaddrs(head)


def _is_loopback(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return False


def interface_env(master_addr: str) -> dict[str, str]:
    """``{"GLOO_SOCKET_IFNAME": <interface>}`` for a rank whose ``MASTER_ADDR`` is ``master_addr``, or ``{}``.

    The interface is the one holding the local address this host would send from to reach
    ``master_addr``. Nothing is returned when the user set ``GLOO_SOCKET_IFNAME`` themselves
    (in the client's environment, which procs inherit, or in the proc), when ``master_addr`` is a
    loopback address (one host: gloo's own default stays, as under torchrun), or when there is no
    route to it (gloo's own error follows).
    """
    current = os.environ.get(GLOO_IFNAME)
    if current is not None and current != _auto.get(GLOO_IFNAME):
        return {}
    source = source_ip_toward(master_addr)
    if source is None or (_is_loopback(source) and GLOO_IFNAME not in _auto):
        return {}
    name = interface_of(source)
    if name is None:
        return {}
    _auto[GLOO_IFNAME] = name
    return {GLOO_IFNAME: name}
