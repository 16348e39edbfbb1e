"""The verbs backend's parts that need no RDMA device, tested for real; device tests skip with the probe's reason."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from tetrarch.plugins import BackendKind, Status, get_registry
from tetrarch.rdma import RDMAError
from tetrarch_rdma_verbs._devices import discover, gid_index, select
from tetrarch_rdma_verbs._import import INSTALL, locate
from tetrarch_rdma_verbs._plugin import probe
from tetrarch_rdma_verbs._status import WC_STATUS, VerbsError, WcError, wc_error
from tetrarch_rdma_verbs._wire import Endpoint, RegionContext, parse_context, parse_endpoint

pytestmark = pytest.mark.timeout(60)


# ------------------------------------------------------------ a sysfs tree as input data
def _pci(root: Path, *chain: str, numa: int = 0) -> str:
    """Make ``sys/devices/pci0000:00/<chain...>`` and its ``sys/bus/pci/devices`` link; returns the device dir."""
    folder = root / "sys/devices/pci0000:00" / Path(*chain)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "numa_node").write_text(f"{numa}\n")
    bus = root / "sys/bus/pci/devices"
    bus.mkdir(parents=True, exist_ok=True)
    os.symlink(folder, bus / chain[-1])
    return str(folder)


def _nic(root: Path, name: str, pci_dir: str, driver: str = "mlx5_core",
         ports: dict[int, tuple[str, str]] | None = None) -> None:
    drivers = root / "sys/bus/pci/drivers" / driver
    drivers.mkdir(parents=True, exist_ok=True)
    if not os.path.lexists(Path(pci_dir) / "driver"):
        os.symlink(drivers, Path(pci_dir) / "driver")
    dev = root / "sys/class/infiniband" / name
    dev.mkdir(parents=True)
    os.symlink(pci_dir, dev / "device")
    for port, (state, link) in (ports or {1: ("4: ACTIVE", "InfiniBand")}).items():
        p = dev / "ports" / str(port)
        p.mkdir(parents=True)
        (p / "state").write_text(state + "\n")
        (p / "link_layer").write_text(link + "\n")


@pytest.fixture
def two_sockets(tmp_path: Path) -> Path:
    """mlx5_0 beside GPU 0000:1b:00.0 (socket 0), mlx5_1 beside GPU 0000:9b:00.0 (socket 1), an EFA device."""
    g0 = _pci(tmp_path, "0000:00:01.0", "0000:1a:00.0", "0000:1b:00.0")
    n0 = _pci(tmp_path, "0000:00:01.0", "0000:1a:00.0", "0000:1c:00.0")
    g1 = _pci(tmp_path, "0000:00:03.0", "0000:9a:00.0", "0000:9b:00.0", numa=1)
    n1 = _pci(tmp_path, "0000:00:03.0", "0000:9a:00.0", "0000:9c:00.0", numa=1)
    efa = _pci(tmp_path, "0000:00:05.0", "0000:a0:00.0")
    _nic(tmp_path, "mlx5_0", n0)
    _nic(tmp_path, "mlx5_1", n1)
    _nic(tmp_path, "efa_0", efa, driver="efa")
    assert g0 and g1
    return tmp_path


def test_discover_reads_devices_ports_and_drivers(two_sockets: Path) -> None:
    devices = {d.name: d for d in discover(str(two_sockets))}
    assert sorted(devices) == ["efa_0", "mlx5_0", "mlx5_1"]
    assert devices["mlx5_1"].ports == {1: ("ACTIVE", "InfiniBand")}
    assert devices["mlx5_1"].numa_node == 1
    assert devices["efa_0"].is_efa and not devices["mlx5_0"].is_efa


def test_the_nic_nearest_the_gpu_wins(two_sockets: Path) -> None:
    root = str(two_sockets)
    assert select(gpu_pci="0000:9b:00.0", root=root).device.name == "mlx5_1"
    chosen = select(gpu_pci="0000:1B:00.0", root=root)
    assert chosen.device.name == "mlx5_0" and "nearest to the GPU" in chosen.why


def test_without_a_gpu_the_first_active_port_wins_and_efa_is_skipped(two_sockets: Path, tmp_path: Path) -> None:
    chosen = select(root=str(two_sockets))
    assert (chosen.device.name, chosen.port) == ("mlx5_0", 1) and "first device" in chosen.why
    only_efa = tmp_path / "efa-only"
    _nic(only_efa, "efa_0", _pci(only_efa, "0000:00:05.0"), driver="efa")
    with pytest.raises(VerbsError, match="only EFA devices"):
        select(root=str(only_efa))


def test_down_ports_are_skipped(tmp_path: Path) -> None:
    _nic(tmp_path, "mlx5_0", _pci(tmp_path, "0000:00:01.0"), ports={1: ("1: DOWN", "InfiniBand")})
    _nic(tmp_path, "mlx5_1", _pci(tmp_path, "0000:00:02.0"),
         ports={1: ("1: DOWN", "Ethernet"), 2: ("4: ACTIVE", "Ethernet")})
    chosen = select(root=str(tmp_path))
    assert (chosen.device.name, chosen.port) == ("mlx5_1", 2)


def test_the_named_device_wins_and_a_wrong_name_lists_the_found_ones(two_sockets: Path) -> None:
    root = str(two_sockets)
    chosen = select("mlx5_1", gpu_pci="0000:1b:00.0", root=root)
    assert chosen.device.name == "mlx5_1" and "TETRARCH_RDMA_DEVICE" in chosen.why
    with pytest.raises(VerbsError, match=r"names no RDMA device here \(found: efa_0 .*mlx5_0.*mlx5_1"):
        select("mlx9_0", root=root)
    with pytest.raises(VerbsError, match="no port '7'"):
        select("mlx5_0:7", root=root)
    with pytest.raises(VerbsError, match="EFA device: use the efa backend"):
        select("efa_0", root=root)


def test_no_device_at_all_says_so(tmp_path: Path) -> None:
    with pytest.raises(VerbsError, match="no RDMA device here"):
        select(root=str(tmp_path))


def test_roce_ports_address_peers_by_their_roce_v2_gid(tmp_path: Path) -> None:
    _nic(tmp_path, "rxe0", _pci(tmp_path, "0000:00:01.0"), ports={1: ("4: ACTIVE", "Ethernet")})
    port = tmp_path / "sys/class/infiniband/rxe0/ports/1"
    (port / "gids").mkdir()
    (port / "gid_attrs/types").mkdir(parents=True)
    for i, (gid, kind) in enumerate([("fe80:0000:0000:0000:0000:0000:0000:0001", "IB/RoCE v1"),
                                     ("0000:0000:0000:0000:0000:ffff:0a00:0001", "RoCE v2")]):
        (port / "gids" / str(i)).write_text(gid + "\n")
        (port / "gid_attrs/types" / str(i)).write_text(kind + "\n")
    device = discover(str(tmp_path))[0]
    assert gid_index(device, 1, str(tmp_path)) == 1


# ------------------------------------------------------------ descriptors and connection messages
def test_region_context_round_trips_through_pickle() -> None:
    ctx = RegionContext(iova=0x7F0000001000, rkey=0x1234, nbytes=4096)
    assert parse_context(pickle.loads(pickle.dumps(ctx.to_builtins()))) == ctx


@pytest.mark.parametrize("bad", [None, [], {"v": 2, "iova": 1, "rkey": 1, "len": 1},
                                 {"v": 1, "iova": "1", "rkey": 1, "len": 1}, {"v": 1, "iova": 1, "rkey": -1, "len": 1}])
def test_a_malformed_context_is_refused_by_name(bad: object) -> None:
    with pytest.raises(VerbsError, match="verbs context"):
        parse_context(bad)


def test_endpoint_round_trip_and_checks() -> None:
    ep = Endpoint(bytes(range(16)), lid=7, qpn=0x1A2B, psn=0xABCDEF, mtu=5, port=1)
    assert parse_endpoint(pickle.loads(pickle.dumps(ep.to_builtins()))) == ep
    with pytest.raises(VerbsError, match="gid has 3 bytes"):
        parse_endpoint({**ep.to_builtins(), "gid": b"abc"})
    with pytest.raises(VerbsError, match="out of range"):
        parse_endpoint({**ep.to_builtins(), "mtu": 9})


# ------------------------------------------------------------ completion statuses
def test_every_non_success_status_names_itself() -> None:
    for status, (name, _meaning) in WC_STATUS.items():
        if status == 0:
            continue
        err = wc_error(status, 0x42, "RDMA READ of 8 bytes")
        assert isinstance(err, RDMAError) and err.name == name and name in str(err) and "0x42" in str(err)
        assert pickle.loads(pickle.dumps(err)).status == status
    assert "fresh RDMABuffer" in str(wc_error(10, 0, "x"))  # a remote key that no longer exists
    assert "IBV_WC_<99>" in str(wc_error(99, 0, "x"))


def test_status_numbers_match_pyverbs() -> None:
    if locate() is None:
        pytest.skip("pyverbs is not installed here")
    from tetrarch_rdma_verbs._import import import_pyverbs

    import_pyverbs()
    import pyverbs.enums as e

    for status, (name, _) in WC_STATUS.items():
        if hasattr(e, name):
            assert getattr(e, name) == status, name
    assert isinstance(WcError("m", 5, "IBV_WC_WR_FLUSH_ERR"), VerbsError)


# ------------------------------------------------------------ the probe on this machine
def test_probe_reports_exactly_why_verbs_is_unusable_here() -> None:
    result = probe()
    if locate() is None:
        assert not result.ok and "pyverbs not found" in result.reason and result.remedy == INSTALL
        assert "python3-pyverbs" in result.remedy and "pip install pyverbs" in result.remedy
        return
    if result.ok:
        pytest.skip(f"this machine has an RDMA device: {result.reason}")
    assert "no RDMA device" in result.reason
    assert "get_device_list() failed" in result.reason or "get_device_list() returned []" in result.reason


def test_the_registry_lists_verbs_with_the_probe_reason() -> None:
    row = next(r for r in get_registry().statuses(BackendKind.RDMA) if r.name == "verbs")
    if row.status is Status.NOT_INSTALLED:  # the sources are on the path, the distribution is not installed
        pytest.skip(f"tetrarch-rdma-verbs is not installed here (its entry point is missing): {row.reason}")
    result = probe()
    assert row.status is (Status.AVAILABLE if result.ok else Status.UNAVAILABLE)
    assert result.reason in row.reason


def test_debian_pyverbs_loads_without_touching_sys_path() -> None:
    import sys

    where = locate()
    if where is None or where == "python path":
        pytest.skip(f"pyverbs comes from {where or 'nowhere'} here, not Debian's package")
    before = list(sys.path)
    from tetrarch_rdma_verbs._import import import_pyverbs

    assert import_pyverbs().__name__ == "pyverbs"
    assert sys.path == before and not any("dist-packages" in p for p in sys.path)
