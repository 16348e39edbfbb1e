"""End to end: a value set with ``configure`` reaches a proc spawned afterwards, through its environment."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from config_actors import SettingProbe

from tetrarch import configured, shutdown_context, this_host

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module", autouse=True)
def _end_host_agents() -> Iterator[None]:
    """This module's host agent ends before the suite's leak check looks for stragglers."""
    yield
    shutdown_context().get(timeout=30)


def test_a_propagating_value_set_from_code_reaches_new_procs() -> None:
    with configured(cleanup_timeout=4.25, test_slowdown=3.0):
        assert "TETRARCH_CLEANUP_TIMEOUT" not in os.environ  # config_env() carries it, not os.environ
        procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        probes = procs.spawn("probe", SettingProbe)
        assert probes.read.call_one("cleanup_timeout").get(timeout=30) == (4.25, "environment", "4.25")
        # test_slowdown does not propagate: the value set from code stays in the client
        value, _, text = probes.read.call_one("test_slowdown").get(timeout=30)
        assert value != 3.0 and text != "3.0"
    finally:
        procs.stop().get(timeout=30)


def test_a_value_set_when_the_host_agent_started_does_not_leak_into_later_procs() -> None:
    """The host agent of ``this_host()`` starts with the values in force at its first spawn;
    procs spawned on it later get the client's values then, not the agent's."""
    with configured(cleanup_timeout=4.25):
        first = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        later = this_host().spawn_procs(per_host={"gpus": 1})
        try:
            got = later.spawn("probe_later", SettingProbe).read.call_one("cleanup_timeout").get(timeout=30)
            assert got[1] == "default" and got[0] != 4.25, got
        finally:
            later.stop().get(timeout=30)
    finally:
        first.stop().get(timeout=30)


def test_a_plugin_setting_set_from_code_reaches_new_procs() -> None:
    """The efa and verbs plugins' settings (their tetrarch_settings hook) travel like core's."""
    pytest.importorskip("tetrarch_rdma_efa")
    pytest.importorskip("tetrarch_rdma_verbs")
    with configured(efa_provider="tcp;ofi_rxm", verbs_max_wr=7):
        procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        probe = procs.spawn("probe_plugin", SettingProbe)
        assert probe.read.call_one("efa_provider").get(timeout=30) == ("tcp;ofi_rxm", "environment", "tcp;ofi_rxm")
        assert probe.read.call_one("verbs_max_wr").get(timeout=30) == (7, "environment", "7")
    finally:
        procs.stop().get(timeout=30)
