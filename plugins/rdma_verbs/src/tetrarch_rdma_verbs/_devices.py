"""Which RDMA device and port a process uses, decided from sysfs alone (no device is opened).

Rules, in order (``select``):

1. ``TETRARCH_RDMA_DEVICE`` (``configure(rdma_device=...)``) names a device (``mlx5_0``) or a
   device and port (``mlx5_0:2``): that one, or an error listing the devices found;
2. with a GPU's PCI address: the device nearest it in the PCIe tree (the one sharing the
   longest chain of bridges with the GPU, then the same NUMA node) that has an active port;
3. else the first device (by name) with an active port.

EFA devices (driver ``efa``) are left to the ``efa`` backend (libfabric) and never chosen.
Everything is read below ``root`` (``/`` normally), so tests run the rules on a sysfs tree
laid out in a temporary folder: ``sys/class/infiniband/<dev>/{device -> ../../../devices/...,
ports/<n>/state, ports/<n>/link_layer}`` and ``sys/bus/pci/devices/<addr> -> ../../../devices/...``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ._status import VerbsError

__all__ = ["Device", "Selection", "discover", "pci_path", "select"]

_CLASS = "sys/class/infiniband"
_PCI = "sys/bus/pci/devices"
_FIX_NONE = ("no RDMA device here (sysfs lists none under /sys/class/infiniband): use a host with an RDMA NIC, or "
             "load the kernel modules (mlx5_ib, or rdma_rxe for Soft-RoCE: `rdma link add rxe0 type rxe netdev eth0`)")


@dataclass(frozen=True, slots=True)
class Device:
    """One RDMA device as sysfs shows it."""

    name: str
    #: The device's real sysfs path (``.../pci0000:00/0000:00:02.0/0000:3b:00.0``), or "" (virtual device).
    path: str
    driver: str
    numa_node: int
    #: ``{port number: (state, link layer)}``, e.g. ``{1: ("ACTIVE", "InfiniBand")}``.
    ports: dict[int, tuple[str, str]]

    @property
    def active_ports(self) -> list[int]:
        return sorted(p for p, (state, _) in self.ports.items() if state == "ACTIVE")

    @property
    def is_efa(self) -> bool:
        return self.driver == "efa"

    def describe(self) -> str:
        ports = ", ".join(f"port {p} {s} {link}".rstrip() for p, (s, link) in sorted(self.ports.items()))
        where = os.path.basename(self.path) or "virtual"
        return f"{self.name} ({self.driver or 'unknown driver'}, {where}, numa {self.numa_node}; {ports or 'no ports'})"


@dataclass(frozen=True, slots=True)
class Selection:
    """The device and port chosen, and why (one line for logs and ``tetrarch doctor rdma``)."""

    device: Device
    port: int
    why: str


def _read(path: str, default: str = "") -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def _state(text: str) -> str:
    # "4: ACTIVE" -> "ACTIVE"
    return text.split(":", 1)[-1].strip() if text else "UNKNOWN"


def discover(root: str = "/") -> list[Device]:
    """The RDMA devices sysfs lists under ``root``, sorted by name (empty when there are none)."""
    base = os.path.join(root, _CLASS)
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    devices = []
    for name in names:
        folder = os.path.join(base, name)
        dev_link = os.path.join(folder, "device")
        path = os.path.realpath(dev_link) if os.path.exists(dev_link) else ""
        driver_link = os.path.join(dev_link, "driver")
        driver = os.path.basename(os.path.realpath(driver_link)) if os.path.exists(driver_link) else ""
        try:
            numa = int(_read(os.path.join(dev_link, "numa_node"), "-1"))
        except ValueError:
            numa = -1
        ports: dict[int, tuple[str, str]] = {}
        ports_dir = os.path.join(folder, "ports")
        try:
            port_names = os.listdir(ports_dir)
        except OSError:
            port_names = []
        for p in port_names:
            if p.isdigit():
                ports[int(p)] = (_state(_read(os.path.join(ports_dir, p, "state"))),
                                 _read(os.path.join(ports_dir, p, "link_layer")))
        devices.append(Device(name, path, driver, numa, ports))
    return devices


def pci_path(pci_address: str, root: str = "/") -> str:
    """The real sysfs path of PCI device ``pci_address`` (``0000:3b:00.0``), or "" if sysfs lacks it."""
    link = os.path.join(root, _PCI, pci_address.lower())
    return os.path.realpath(link) if os.path.exists(link) else ""


def _shared_depth(a: str, b: str) -> int:
    """How many path components two sysfs device paths share (more shared bridges: nearer)."""
    n = 0
    for x, y in zip(a.split(os.sep), b.split(os.sep), strict=False):
        if x != y:
            break
        n += 1
    return n


def _numa_of(path: str) -> int:
    try:
        return int(_read(os.path.join(path, "numa_node"), "-1"))
    except ValueError:
        return -1


def select(requested: str | None = None, gpu_pci: str | None = None, root: str = "/") -> Selection:
    """Choose a device and port by the module's rules.

    Args:
        requested: ``TETRARCH_RDMA_DEVICE``'s value (``name`` or ``name:port``), or None.
        gpu_pci: the PCI address of the GPU whose memory is moved, or None.

    Raises:
        VerbsError: no usable device (none at all, only EFA devices, no active port), or
            ``requested`` names one that is absent, an EFA device, or a port it lacks; the
            message lists what was found and the fix.
    """
    devices = discover(root)
    found = "; ".join(d.describe() for d in devices) or "none"
    if requested:
        name, _, port_text = requested.partition(":")
        match = next((d for d in devices if d.name == name), None)
        if match is None:
            raise VerbsError(f"TETRARCH_RDMA_DEVICE={requested!r} names no RDMA device here (found: {found}); "
                             f"set it to one of them or unset it")
        if match.is_efa:
            raise VerbsError(f"TETRARCH_RDMA_DEVICE={requested!r} is an EFA device: use the efa backend "
                             f"(TETRARCH_RDMA_BACKEND=efa) or name another device (found: {found})")
        if port_text:
            if not port_text.isdigit() or int(port_text) not in match.ports:
                raise VerbsError(f"TETRARCH_RDMA_DEVICE={requested!r}: {name} has no port {port_text!r} "
                                 f"({match.describe()})")
            port = int(port_text)
        else:
            port = (match.active_ports or sorted(match.ports) or [1])[0]
        return Selection(match, port, f"{match.name} port {port}: named by TETRARCH_RDMA_DEVICE")
    if not devices:
        raise VerbsError(_FIX_NONE)
    usable = [d for d in devices if not d.is_efa and d.active_ports]
    if not usable:
        efa = [d.name for d in devices if d.is_efa]
        detail = (f"only EFA devices ({', '.join(efa)}), which the efa backend drives" if len(efa) == len(devices)
                  else "no port is ACTIVE (check the cable and `ibstat`; a RoCE port needs its netdev up)")
        raise VerbsError(f"no usable RDMA device for verbs: {detail} (found: {found})")
    if gpu_pci:
        gpu_path = pci_path(gpu_pci, root)
        if gpu_path:
            gpu_numa = _numa_of(gpu_path)
            best = max(usable, key=lambda d: (_shared_depth(d.path, gpu_path), d.numa_node == gpu_numa >= 0))
            return Selection(best, best.active_ports[0],
                             f"{best.name} port {best.active_ports[0]}: nearest to the GPU at {gpu_pci} in the PCIe "
                             f"tree ({_shared_depth(best.path, gpu_path)} shared path components)")
    first = usable[0]
    return Selection(first, first.active_ports[0], f"{first.name} port {first.active_ports[0]}: the first device "
                     f"with an active port" + (f" (GPU {gpu_pci} not in sysfs)" if gpu_pci else ""))


def gid_index(device: Device, port: int, root: str = "/") -> int:
    """The GID table index to address peers with: on a RoCE (Ethernet) port the first non-zero
    ``RoCE v2`` GID (routable), else the first non-zero one; on InfiniBand 0."""
    if device.ports.get(port, ("", ""))[1] != "Ethernet":
        return 0
    folder = os.path.join(root, _CLASS, device.name, "ports", str(port))
    fallback = None
    for i in range(256):
        gid = _read(os.path.join(folder, "gids", str(i)))
        if not gid:
            break
        if not gid.replace(":", "").strip("0"):
            continue
        if _read(os.path.join(folder, "gid_attrs", "types", str(i))).lower() == "roce v2":
            return i
        fallback = i if fallback is None else fallback
    return fallback or 0
