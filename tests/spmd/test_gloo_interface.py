"""GLOO_SOCKET_IFNAME: set for a MASTER_ADDR off this host's loopback, never over the user's choice.

The two-host run itself is plugins/alloc_slurm/tests/test_spmd_slurm.py; these check the rule without a network.
"""

from __future__ import annotations

import sys

import pytest

from tetrarch._spmd import _net
from tetrarch._spmd._env import RankInfo, torchrun_env

pytestmark = [pytest.mark.transport_independent,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="getifaddrs layout: Linux")]

INFO = RankInfo(rank=1, world_size=4, local_rank=1, local_world_size=2)


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_net.GLOO_IFNAME, raising=False)
    monkeypatch.setattr(_net, "_auto", {})


def _routed_off_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if MASTER_ADDR were another host's, reached from this host's 127.0.0.1 (held by ``lo``)."""
    monkeypatch.setattr(_net, "source_ip_toward", lambda host: "127.0.0.1")
    monkeypatch.setattr(_net, "_is_loopback", lambda ip: False)


def test_the_interface_holding_an_address_is_found() -> None:
    assert _net.interface_of("127.0.0.1") == "lo"
    assert _net.interface_of("192.0.2.255") is None  # TEST-NET-1 broadcast: no interface holds it


def test_one_host_leaves_gloo_alone() -> None:
    env = torchrun_env(INFO, "127.0.0.1", 29500, agent_store=True)
    assert _net.GLOO_IFNAME not in env


def test_a_master_on_another_host_pins_gloo_to_the_interface_toward_it(monkeypatch: pytest.MonkeyPatch) -> None:
    _routed_off_loopback(monkeypatch)
    env = torchrun_env(INFO, "10.99.0.1", 29500, agent_store=True)
    assert env[_net.GLOO_IFNAME] == "lo"
    assert env["MASTER_ADDR"] == "10.99.0.1"


def test_the_users_choice_is_kept_and_tetrarchs_own_value_is_recomputed(monkeypatch: pytest.MonkeyPatch) -> None:
    _routed_off_loopback(monkeypatch)
    monkeypatch.setenv(_net.GLOO_IFNAME, "ib0")
    assert _net.GLOO_IFNAME not in torchrun_env(INFO, "10.99.0.1", 29500, agent_store=True)
    monkeypatch.delenv(_net.GLOO_IFNAME)
    first = torchrun_env(INFO, "10.99.0.1", 29500, agent_store=True)
    monkeypatch.setenv(_net.GLOO_IFNAME, first[_net.GLOO_IFNAME])  # as setup_env applied it
    assert torchrun_env(INFO, "10.99.0.1", 29501, agent_store=True)[_net.GLOO_IFNAME] == "lo"


def test_no_route_sets_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_net, "source_ip_toward", lambda host: None)
    assert _net.interface_env("10.99.0.1") == {}
