"""Monarch's configuration names: those tetrarch maps onto its settings, those it refuses, and misspellings."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from config_actors import SettingProbe

import tetrarch
from tetrarch import shutdown_context, this_host
from tetrarch._config import configure, known_settings
from tetrarch._config_monarch import MONARCH_ALIASES, MONARCH_REFUSED, format_duration, parse_duration
from tetrarch.config import clear_runtime_config, configured, get_global_config, get_runtime_config, source

pytestmark = pytest.mark.timeout(120)

#: Every keyword of Monarch's ``monarch.config.configure`` (python/monarch/config/__init__.py)
#: and the config keys declared with a Python name in hyperactor, hyperactor_mesh, monarch_hyperactor
#: and monarch_rdma that it forwards through ``**kwargs``.
MONARCH_CONFIGURE_NAMES = (
    "default_transport", "enable_log_forwarding", "enable_file_capture", "tail_log_lines", "codec_max_frame_length",
    "message_delivery_timeout", "host_spawn_ready_timeout", "mesh_proc_spawn_max_idle", "process_exit_timeout",
    "message_ack_time_interval", "message_ack_every_n_messages", "message_ttl_default", "split_max_buffer_size",
    "split_max_buffer_age", "stop_actor_timeout", "cleanup_timeout", "remote_allocator_heartbeat_interval",
    "default_encoding", "channel_net_rx_buffer_full_check_interval", "message_latency_sampling_rate",
    "enable_dest_actor_reordering_buffer", "mesh_bootstrap_enable_pdeathsig", "mesh_terminate_concurrency",
    "mesh_terminate_timeout", "shared_asyncio_runtime", "small_write_threshold", "max_cast_dimension_size",
    "remote_alloc_bind_to_inaddr_any", "remote_alloc_bootstrap_addr", "remote_alloc_allowed_port_range",
    "read_log_buffer", "force_file_log", "prefix_with_rank", "actor_spawn_max_idle", "get_actor_state_max_idle",
    "supervision_watchdog_timeout", "proc_stop_max_idle", "get_proc_state_max_idle", "actor_queue_dispatch",
    "mesh_orphan_timeout", "terminated_snapshot_retention", "channel_tcp_keepalive_idle", "channel_reconnect_timeout",
    "sequencer_max_locked_keys", "server_heartbeat_interval", "forwarder_flush_timeout", "hyperactor_tls_cert",
    "hyperactor_tls_key", "hyperactor_tls_ca", "tokio_worker_threads", "rdma_max_chunk_size_mb",
    "rdma_allow_tcp_fallback", "rdma_disable_ibverbs", "rdma_tcp_fallback_parallelism", "rdma_ibverbs_target",
    "rdma_peer_device_affinity", "rdma_runtime_worker_threads", "mesh_admin_addr", "mesh_attach_config_timeout",
    "channel_tcp_congestion",
)

#: Monarch name -> (a value as a Monarch program passes it, tetrarch's value, what the Monarch name reads back).
CASES: dict[str, tuple[object, object, object]] = {
    "default_transport": ("unix", "ipc", "ipc"),
    "enable_log_forwarding": (False, False, False),
    "host_spawn_ready_timeout": ("2m", 120.0, "2m"),
    "mesh_proc_spawn_max_idle": ("1m 30s", 90.0, "1m 30s"),
    "process_exit_timeout": ("45s", 45.0, "45s"),
    "stop_actor_timeout": ("1500ms", 1.5, "1s 500ms"),
    "mesh_terminate_timeout": (12, 12.0, "12s"),
    "proc_stop_max_idle": ("20s", 20.0, "20s"),
    "cleanup_timeout": ("3s", 3.0, 3.0),  # tetrarch's own name: its value, in seconds
    "mesh_orphan_timeout": ("1h", 3600.0, "1h"),
    "rdma_allow_tcp_fallback": (False, False, False),
    "rdma_max_chunk_size_mb": (16, 16 << 20, 16),
    "rdma_disable_ibverbs": (True, "tcp", True),
    "rdma_ibverbs_target": ("nic:mlx5_1", "mlx5_1", "nic:mlx5_1"),
}

#: Every setting a Monarch name may stand for: core's and the installed plugins' (verbs: rdma_device, ...).
ALL = known_settings()


def test_every_name_of_monarchs_configure_is_mapped_or_refused() -> None:
    assert set(MONARCH_ALIASES).isdisjoint(MONARCH_REFUSED)
    missing = set(MONARCH_CONFIGURE_NAMES) - set(MONARCH_ALIASES) - set(MONARCH_REFUSED)
    assert not missing, f"add these to tetrarch/_config_monarch.py: {sorted(missing)}"
    assert set(CASES) == set(MONARCH_ALIASES)
    for alias in MONARCH_ALIASES.values():
        assert alias.key in ALL, alias
    assert not set(MONARCH_REFUSED) & set(ALL)


def test_a_refusal_names_only_settings_that_exist() -> None:
    for name, why in MONARCH_REFUSED.items():
        for word in re.findall(r"`([a-z_]+)`", why):
            assert word in ALL or word in {"logging", "tetrarch"}, (name, word)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_monarch_name_sets_the_tetrarch_setting(name: str) -> None:
    given, ours, theirs = CASES[name]
    key = MONARCH_ALIASES[name].key
    configure(**{name: given})
    assert ALL[key]() == ours and source(name) == source(key) == "code"
    config = get_global_config()
    assert config[key] == ours and config[name] == theirs
    assert get_runtime_config() == {key: ours}
    configure(**{name: None})  # None drops the value set from code, as for tetrarch's names
    assert ALL[key].source() == "default"


@pytest.mark.parametrize("name", sorted(MONARCH_REFUSED))
def test_a_refused_monarch_name_raises_with_what_to_do(name: str) -> None:
    with pytest.raises(ValueError) as info:
        configure(stop_timeout=7, **{name: "1s"})
    assert f"Monarch's setting {name!r} has no tetrarch equivalent: {MONARCH_REFUSED[name]}" in str(info.value)
    assert ALL["stop_timeout"].source() == "default"  # nothing of the call was set
    with pytest.raises(ValueError, match="has no tetrarch equivalent"):
        source(name)


@pytest.mark.parametrize(
    ("given", "nearest"),
    [("stop_timout", "stop_timeout"), ("mesh_orphan_timeot", "mesh_orphan_timeout"),
     ("enable_log_fowarding", "enable_log_forwarding"), ("message_delivery_timout", "message_delivery_timeout")],
)
def test_an_unknown_name_suggests_the_nearest_known_one(given: str, nearest: str) -> None:
    with pytest.raises(TypeError, match=rf"unknown setting\(s\) {given} \(did you mean {nearest}\?\); valid: "):
        configure(**{given: 1})
    with pytest.raises(ValueError, match=rf"unknown setting '{given}' \(did you mean"):
        source(given)


def test_an_unknown_name_far_from_any_gets_the_list_only() -> None:
    with pytest.raises(TypeError, match=r"unknown setting\(s\) enable_tls; valid: host_start_timeout, .* Monarch's"):
        configure(enable_tls=True)


@pytest.mark.parametrize(
    ("values", "error", "message"),
    [
        ({"stop_actor_timeout": "1s", "process_exit_timeout": "2s"}, ValueError,
         "got both 'stop_actor_timeout' and 'process_exit_timeout', which both set tetrarch's 'stop_timeout'"),
        ({"orphan_timeout": 3, "mesh_orphan_timeout": "4s"}, ValueError, "both set tetrarch's 'orphan_timeout'"),
        ({"mesh_orphan_timeout": "soon"}, ValueError,
         r"configure\(mesh_orphan_timeout='soon'\): 'soon' is not a duration such as '30s'"),
        ({"mesh_orphan_timeout": "-5s"}, ValueError, "not a duration"),
        ({"mesh_orphan_timeout": True}, TypeError, "expected a duration .* or a number of seconds, got bool"),
        ({"host_spawn_ready_timeout": "0s"}, ValueError, "Monarch reads 0 as 'wait forever'; tetrarch needs a bound"),
        ({"default_transport": "metatls"}, ValueError, "no TLS or QUIC transport.*use 'tcp'"),
        ({"rdma_ibverbs_target": "gpu:0"}, ValueError, "only the 'nic:<device>' form"),
        ({"rdma_max_chunk_size_mb": "64"}, TypeError, "expected an integer of MiB, got str"),
        ({"rdma_disable_ibverbs": "yes"}, TypeError, "expected a boolean, got str"),
        ({"enable_log_forwarding": "perhaps"}, TypeError,
         r"configure\(enable_log_forwarding='perhaps'\): expected a boolean, got str"),
    ],
)
def test_a_bad_value_under_a_monarch_name_sets_nothing(values: dict[str, object], error: type[Exception],
                                                         message: str) -> None:
    with pytest.raises(error, match=message):
        configure(**values)
    assert get_runtime_config() == {}


def test_durations_read_and_print_as_monarch_writes_them(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [parse_duration(t) for t in ("30s", "1h 30m", "500ms", "2min", "1m30s", "1.5s")] == [
        30.0, 5400.0, 0.5, 120.0, 90.0, 1.5]
    assert [format_duration(s) for s in (30.0, 5400.0, 0.5, 0.0, 86400 + 1.25, float("inf"))] == [
        "30s", "1h 30m", "500ms", "0s", "1d 1s 250ms", "inf"]
    monkeypatch.setenv("TETRARCH_STOP_TIMEOUT", "2m")  # tetrarch's seconds settings read them too
    assert ALL["stop_timeout"]() == 120.0
    configure(cleanup_timeout="750ms")
    assert ALL["cleanup_timeout"]() == 0.75


def test_configured_yields_the_merged_config_and_restores() -> None:
    configure(stop_timeout=9)
    with configured(mesh_orphan_timeout="90s", enable_log_forwarding=False) as config:
        assert config["orphan_timeout"] == 90.0 and config["mesh_orphan_timeout"] == "1m 30s"
        assert config["forward_output"] is False and config["stop_timeout"] == 9.0
        assert get_runtime_config() == {"stop_timeout": 9.0, "orphan_timeout": 90.0, "forward_output": False}
    assert get_runtime_config() == {"stop_timeout": 9.0}
    saved = get_runtime_config()
    clear_runtime_config()  # Monarch's snapshot/restore idiom works on tetrarch's keys
    assert get_runtime_config() == {} and ALL["stop_timeout"]() == 10.0
    configure(**saved)
    assert ALL["stop_timeout"]() == 9.0


def test_the_view_configured_yields_reads_on_access(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETRARCH_HEARTBEAT_INTERVAL", "often")  # a bad variable elsewhere does not stop the block
    with configured(cleanup_timeout="2s") as config:
        assert config["cleanup_timeout"] == 2.0 and "mesh_orphan_timeout" in config and "nope" not in config
        assert len(config) == len(list(config)) == len(set(ALL) | set(MONARCH_ALIASES))
        with pytest.raises(ValueError, match="TETRARCH_HEARTBEAT_INTERVAL='often'"):
            config["heartbeat_interval"]
        with pytest.raises(KeyError):
            config["message_delivery_timeout"]  # refused: no value to show


def test_the_public_module_mirrors_monarch_config() -> None:
    assert sorted(tetrarch.config.__all__) == ["clear_runtime_config", "configure", "configured",
                                               "get_global_config", "get_runtime_config", "source"]
    assert tetrarch.config.configure is tetrarch.configure


# ------------------------------------------------------------------ end to end: what procs see


def _rounds() -> list[dict[str, str]]:
    """The propagating aliases, as calls that each set a setting under at most one name."""
    by_key: dict[str, list[str]] = {}
    for name, alias in sorted(MONARCH_ALIASES.items()):
        if ALL[alias.key].propagate:
            by_key.setdefault(alias.key, []).append(name)
    return [{key: names[i] for key, names in by_key.items() if i < len(names)}
            for i in range(max(len(names) for names in by_key.values()))]


@pytest.fixture(scope="module", autouse=True)
def _end_host_agents() -> Iterator[None]:
    """This module's host agent ends before the suite's leak check looks for stragglers."""
    yield
    shutdown_context().get(timeout=30)


@pytest.mark.parametrize("round_", _rounds(), ids=lambda r: "+".join(sorted(r.values())))
def test_monarch_names_set_in_the_client_reach_new_procs(round_: dict[str, str]) -> None:
    with configured(**{name: CASES[name][0] for name in round_.values()}):
        procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        probe = procs.spawn("probe", SettingProbe)
        for key, name in round_.items():
            assert probe.read.call_one(key).get(timeout=30)[:2] == (CASES[name][1], "environment"), name
            assert probe.read_monarch.call_one(name).get(timeout=30) == CASES[name][2], name
    finally:
        procs.stop().get(timeout=30)
