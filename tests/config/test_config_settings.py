"""The settings table: declarations, precedence, validation, ``configure``/``configured``, ``config_env``."""

from __future__ import annotations

import dataclasses
import threading

import pytest

import tetrarch
from tetrarch._config import (
    CLEANUP_TIMEOUT,
    CONFIG_VARS,
    CONNECT_TIMEOUT,
    DISABLE_PLUGINS,
    ENV_RANK_DIM,
    ENV_SECRET_FD,
    FROZEN_TIMEOUT,
    HEARTBEAT_INTERVAL,
    HOST_START_TIMEOUT,
    LAUNCH_VARS,
    ORPHAN_TIMEOUT,
    PLUGINS_STRICT,
    PROC_START_TIMEOUT,
    RDMA_FALLBACK,
    SETTINGS,
    STOP_TIMEOUT,
    TEST_SETTINGS,
    TEST_SLOWDOWN,
    TRANSPORT,
    Setting,
    config_env,
    configure,
    configured,
    env_float,
    source,
)

TIMEOUTS = {
    HOST_START_TIMEOUT: 60.0, PROC_START_TIMEOUT: 60.0, STOP_TIMEOUT: 10.0, CONNECT_TIMEOUT: 10.0,
    CLEANUP_TIMEOUT: 5.0, HEARTBEAT_INTERVAL: 1.0, ORPHAN_TIMEOUT: 30.0, FROZEN_TIMEOUT: 8.0,
}


# ------------------------------------------------------------------ declarations


def test_every_setting_is_declared_once_with_its_variable() -> None:
    assert list(SETTINGS) == [
        "host_start_timeout", "proc_start_timeout", "stop_timeout", "connect_timeout", "cleanup_timeout",
        "heartbeat_interval", "orphan_timeout", "frozen_timeout", "host_timeout", "transport", "listen_address",
        "allocator",
        "rdma_backend", "disable_plugins", "plugins_strict", "rdma_fallback", "rdma_tcp_chunk_size",
        "rdma_tcp_window", "forward_output",
        "fork_procs", "preload", "standby", "spin_us", "relay_min", "batch_io_threads", "aggregate_window",
        "shm_payloads", "shm_min_bytes", "shm_pool_bytes", "cuda_ipc", "admin", "admin_host", "admin_port",
        "admin_dir",
        "event_log", "metrics", "trace_sample", "trace_file", "trace_export", "telemetry_store",
        "telemetry_rows", "telemetry_dir", "telemetry_disk_mb",
    ]
    assert list(TEST_SETTINGS) == ["test_slowdown", "fuzz_examples"]  # listed apart, set alike
    for key, setting in {**SETTINGS, **TEST_SETTINGS}.items():
        assert setting.key == key and setting.env == f"TETRARCH_{key.upper()}"
        assert setting.doc and "\n" not in setting.doc
    assert TEST_SLOWDOWN.default == 1.0 and TEST_SLOWDOWN.type is float and not TEST_SLOWDOWN.propagate
    assert tuple(s.env for s in SETTINGS.values() if s.propagate) == CONFIG_VARS


def test_the_runtime_call_sites_keep_their_defaults() -> None:
    for setting, default in TIMEOUTS.items():
        assert setting() == default and isinstance(setting(), float)
        assert setting.unit == "seconds"
    assert (TRANSPORT(), DISABLE_PLUGINS(), PLUGINS_STRICT(), RDMA_FALLBACK()) == (None, (), False, True)


def test_setting_is_a_frozen_slotted_generic_record() -> None:
    assert "__slots__" in vars(Setting) and not hasattr(STOP_TIMEOUT, "__dict__")
    with pytest.raises(dataclasses.FrozenInstanceError):
        STOP_TIMEOUT.default = 1.0  # type: ignore[misc]
    assert Setting[float] is not None  # subscriptable for type hints
    assert [f.name for f in dataclasses.fields(Setting)][:6] == ["key", "env", "type", "default", "doc", "propagate"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("stop", "TETRARCH_STOP_TIMEOUT", float, 1.0, "x"), "must be TETRARCH_STOP"),
        (("x", "TETRARCH_X", list, [], "x"), "unsupported type"),
        (("x", "TETRARCH_X", float, 1, "x"), "is not a float"),
    ],
)
def test_inconsistent_declarations_are_refused(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Setting(*args)


def test_launch_variables_are_declared_apart_from_settings() -> None:
    assert ENV_SECRET_FD.name == "TETRARCH_SECRET_FD"
    assert set(LAUNCH_VARS) == {
        "TETRARCH_SECRET_FD", "TETRARCH_SECRET_FILE", "TETRARCH_LAUNCHER_PID", "TETRARCH_OWNER_ADDR",
        "TETRARCH_PROC_ID", "TETRARCH_CLIENT_ADDR", "TETRARCH_ALLOC_ID",
        "TETRARCH_HOST_INDEX", "TETRARCH_HOST_AGENT_ADDR", "TETRARCH_RELAYED", "TETRARCH_HOST_AGENT_PID",
        "TETRARCH_SYS_PATH", "TETRARCH_PROC_MESH",
        "TETRARCH_RANK_<DIM>", "TETRARCH_SIZE_<DIM>", "TETRARCH_PROC_COORDS", "TETRARCH_SPANS_HOSTS",
        "TETRARCH_ALLOC_TRANSPORT", "TETRARCH_AT_DEFAULT", "TETRARCH_SPMD_BACKEND",
    }
    assert not set(LAUNCH_VARS) & {s.env for s in SETTINGS.values()}
    assert all(v.doc for v in LAUNCH_VARS.values())
    assert ENV_RANK_DIM.for_dim("gpus") == "TETRARCH_RANK_GPUS"
    with pytest.raises(ValueError, match="not per dimension"):
        ENV_SECRET_FD.for_dim("gpus")


# ------------------------------------------------------------------ precedence


def test_code_beats_environment_beats_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (STOP_TIMEOUT(), source("stop_timeout")) == (10.0, "default")
    monkeypatch.setenv("TETRARCH_STOP_TIMEOUT", "3")
    assert (STOP_TIMEOUT(), source("stop_timeout")) == (3.0, "environment")  # read at call time
    configure(stop_timeout=7)
    assert (STOP_TIMEOUT(), STOP_TIMEOUT.source()) == (7.0, "code")
    assert STOP_TIMEOUT.lookup() == (7.0, "code")
    configure(stop_timeout=None)  # drops the value from code
    assert (STOP_TIMEOUT(), source("stop_timeout")) == (3.0, "environment")


@pytest.mark.parametrize("blank", ["", "   "])
def test_a_blank_variable_counts_as_unset(monkeypatch: pytest.MonkeyPatch, blank: str) -> None:
    monkeypatch.setenv("TETRARCH_CONNECT_TIMEOUT", blank)
    monkeypatch.setenv("TETRARCH_TRANSPORT", blank)
    assert (CONNECT_TIMEOUT(), source("connect_timeout")) == (10.0, "default")
    assert (TRANSPORT(), source("transport")) == (None, "default")


def test_environment_text_is_parsed_by_type(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETRARCH_DISABLE_PLUGINS", " a, b ,,c ")
    monkeypatch.setenv("TETRARCH_RDMA_FALLBACK", "OFF")
    monkeypatch.setenv("TETRARCH_PLUGINS_STRICT", "Yes")
    monkeypatch.setenv("TETRARCH_TRANSPORT", " tcp ")
    monkeypatch.setenv("TETRARCH_TEST_SLOWDOWN", "2.5")
    assert DISABLE_PLUGINS() == ("a", "b", "c")
    assert (RDMA_FALLBACK(), PLUGINS_STRICT()) == (False, True)
    assert TRANSPORT() == "tcp"
    assert TEST_SLOWDOWN() == 2.5


@pytest.mark.parametrize(
    ("env", "raw", "message"),
    [
        ("TETRARCH_STOP_TIMEOUT", "ten",
         ("environment variable TETRARCH_STOP_TIMEOUT='ten' must be a number of seconds "
         "(or a duration such as '30s', '1m 30s' or '500ms')")),
        ("TETRARCH_TEST_SLOWDOWN", "x2", "environment variable TETRARCH_TEST_SLOWDOWN='x2' must be a number"),
        ("TETRARCH_RDMA_FALLBACK", "maybe",
         "environment variable TETRARCH_RDMA_FALLBACK='maybe' must be a boolean (1/0, true/false, yes/no, on/off)"),
    ],
)
def test_a_bad_environment_value_names_variable_value_and_type(
    monkeypatch: pytest.MonkeyPatch, env: str, raw: str, message: str
) -> None:
    monkeypatch.setenv(env, raw)
    setting = next(s for s in {**SETTINGS, **TEST_SETTINGS}.values() if s.env == env)
    with pytest.raises(ValueError) as info:
        setting()
    assert str(info.value) == message
    assert setting.source() == "environment"


def test_env_float_keeps_working_for_other_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    assert env_float("TETRARCH_NOT_A_SETTING", 2.0) == 2.0
    monkeypatch.setenv("TETRARCH_NOT_A_SETTING", "4")
    assert env_float("TETRARCH_NOT_A_SETTING", 2.0) == 4.0
    monkeypatch.setenv("TETRARCH_NOT_A_SETTING", "soon")
    with pytest.raises(ValueError, match="TETRARCH_NOT_A_SETTING='soon' must be a number of seconds"):
        env_float("TETRARCH_NOT_A_SETTING", 2.0)


# ------------------------------------------------------------------ configure


def test_configure_coerces_like_the_environment() -> None:
    configure(stop_timeout=3, connect_timeout="4.5", plugins_strict="on", rdma_fallback=False,
              disable_plugins=["x", "y"], transport="tcp")
    assert (STOP_TIMEOUT(), CONNECT_TIMEOUT()) == (3.0, 4.5)
    assert isinstance(STOP_TIMEOUT(), float)
    assert (PLUGINS_STRICT(), RDMA_FALLBACK()) == (True, False)
    assert (DISABLE_PLUGINS(), TRANSPORT()) == (("x", "y"), "tcp")
    configure(disable_plugins="p, q")
    assert DISABLE_PLUGINS() == ("p", "q")


def test_configure_names_the_valid_keys_for_an_unknown_one() -> None:
    with pytest.raises(TypeError, match=r"unknown setting.*stop_timout \(did you mean stop_timeout\?\); "
                                        r"valid: host_start_timeout, .*stop_timeout"):
        configure(stop_timout=1)
    with pytest.raises(ValueError, match=r"unknown setting 'nope'; valid: .*test_slowdown"):
        source("nope")


@pytest.mark.parametrize(
    ("values", "error", "message"),
    [
        ({"stop_timeout": True}, TypeError, r"configure\(stop_timeout=True\): expected a number of seconds, got bool"),
        ({"stop_timeout": [1]}, TypeError, "expected a number of seconds, got list"),
        ({"plugins_strict": 1}, TypeError, "expected a boolean .*, got int"),
        ({"transport": 3}, TypeError, "expected a name, got int"),
        ({"disable_plugins": [1]}, TypeError, "expected comma-separated names, got list"),
        ({"stop_timeout": "soon"}, ValueError, r"configure\(stop_timeout='soon'\) must be a number of seconds"),
        ({"rdma_fallback": "perhaps"}, ValueError, "must be a boolean"),
        ({"transport": " "}, ValueError, "an empty value; pass None"),
    ],
)
def test_configure_refuses_bad_values(values: dict, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        configure(**values)


def test_configure_sets_nothing_unless_every_value_is_valid() -> None:
    with pytest.raises(ValueError):
        configure(stop_timeout=1, connect_timeout="x")
    assert source("stop_timeout") == "default"


def test_configure_is_exported_lazily_from_tetrarch() -> None:
    assert tetrarch.configure is configure and tetrarch.configured is configured
    assert {"configure", "configured"} <= set(tetrarch.__all__)


# ------------------------------------------------------------------ configured


def test_configured_restores_on_exit_and_nests(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETRARCH_STOP_TIMEOUT", "2")
    configure(cleanup_timeout=1)
    with configured(stop_timeout=5, cleanup_timeout=6):
        assert (STOP_TIMEOUT(), CLEANUP_TIMEOUT()) == (5.0, 6.0)
        with configured(stop_timeout=7):
            assert (STOP_TIMEOUT(), CLEANUP_TIMEOUT()) == (7.0, 6.0)
        assert STOP_TIMEOUT() == 5.0
    assert (STOP_TIMEOUT(), source("stop_timeout")) == (2.0, "environment")
    assert (CLEANUP_TIMEOUT(), source("cleanup_timeout")) == (1.0, "code")


def test_configured_restores_when_the_block_raises() -> None:
    def fail_inside() -> None:
        with configured(orphan_timeout=3):
            assert ORPHAN_TIMEOUT() == 3.0
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail_inside()
    assert source("orphan_timeout") == "default"


def test_configured_checks_values_on_entry() -> None:
    with pytest.raises(TypeError, match="unknown setting"), configured(bogus=1):
        pytest.fail("the block must not run")


def test_configure_from_many_threads_loses_no_update() -> None:
    keys = [s.key for s in TIMEOUTS]
    barrier = threading.Barrier(len(keys))

    def work(key: str) -> None:
        barrier.wait()
        for i in range(1, 201):
            configure(**{key: i})
            with configured(**{key: -i}):
                pass

    threads = [threading.Thread(target=work, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [SETTINGS[k]() for k in keys] == [200.0] * len(keys)


# ------------------------------------------------------------------ config_env


def test_config_env_renders_what_propagates(monkeypatch: pytest.MonkeyPatch) -> None:
    assert config_env() == {}
    monkeypatch.setenv("TETRARCH_ORPHAN_TIMEOUT", "2")
    monkeypatch.setenv("TETRARCH_TEST_SLOWDOWN", "3")  # does not propagate
    configure(stop_timeout=4, transport="tcp", disable_plugins=["a", "b"], rdma_fallback=False)
    assert config_env() == {
        "TETRARCH_ORPHAN_TIMEOUT": "2.0",
        "TETRARCH_STOP_TIMEOUT": "4.0",
        "TETRARCH_DISABLE_PLUGINS": "a,b",
        "TETRARCH_RDMA_FALLBACK": "0",
    }


@pytest.mark.parametrize(("key", "value"), [("stop_timeout", 0.1), ("plugins_strict", True),
                                            ("rdma_fallback", False), ("disable_plugins", ("a", "b")),
                                            ("allocator", "local")])
def test_rendering_reads_back_the_same_value(key: str, value: object) -> None:
    setting = SETTINGS[key]
    assert setting.parse(setting.render(value)) == value


def test_a_bad_environment_value_fails_config_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETRARCH_HEARTBEAT_INTERVAL", "often")
    with pytest.raises(ValueError, match="TETRARCH_HEARTBEAT_INTERVAL='often'"):
        config_env()
