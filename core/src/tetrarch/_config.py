"""tetrarch's settings, each declared once as a :class:`Setting`.

A setting's value comes from, in this order: a value set from code
(:func:`configure`, :func:`configured`), its ``TETRARCH_*`` environment variable, its
default. Values are read at call time (``STOP_TIMEOUT()``), so a test's
``monkeypatch.setenv`` or a later :func:`configure` is seen at once.

:func:`config_env` renders the settings that reach procs spawned afterwards; the
runtime passes it to every proc it starts. The ``TETRARCH_*`` variables the kernel
itself sets for the processes it starts are no settings; they are declared in
:mod:`tetrarch._config_launch` (:data:`LAUNCH_VARS`) and importable from here, so that
every ``TETRARCH_*`` name can be imported from this module.

:func:`configure` also takes Monarch's names for the settings tetrarch has
(``mesh_orphan_timeout="60s"``) and refuses Monarch's other names with the way to get
the same effect here; :mod:`tetrarch._config_monarch` holds that table.

Plugins declare their own settings (hook ``tetrarch_settings``); :mod:`tetrarch._config_plugins`
reads them from the plugin registry, and :func:`known_settings` is core's, theirs and the test
suite's (:data:`TEST_SETTINGS`, listed apart). ``configure`` and :func:`config_env` take them all.

``python -m tetrarch._config_doc --markdown`` prints the tables of ``docs/configuration.md``;
``--update docs/configuration.md`` rewrites them there.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any

from ._config_launch import (
    ENV_ALLOC_ID,
    ENV_ALLOC_TRANSPORT,
    ENV_AT_DEFAULT,
    ENV_CLIENT_ADDR,
    ENV_HOST_AGENT_ADDR,
    ENV_HOST_AGENT_PID,
    ENV_HOST_INDEX,
    ENV_LAUNCHER_PID,
    ENV_OWNER_ADDR,
    ENV_PROC_COORDS,
    ENV_PROC_ID,
    ENV_PROC_MESH,
    ENV_RANK_DIM,
    ENV_RELAYED,
    ENV_SECRET_FD,
    ENV_SECRET_FILE,
    ENV_SIZE_DIM,
    ENV_SPANS_HOSTS,
    ENV_SPMD_BACKEND,
    ENV_SYS_PATH,
    LAUNCH_VARS,
    LaunchVar,
)
from ._config_monarch import MONARCH_ALIASES, MONARCH_REFUSED, closest, translate
from ._config_plugins import absent_owner, plugin_settings
from ._config_setting import CODE, Setting, Source
from ._config_setting import UNSET as _UNSET
from ._errors import ArgumentTypeError, ConfigError

__all__ = [
    "ADMIN",
    "ADMIN_DIR",
    "ADMIN_HOST",
    "ADMIN_PORT",
    "AGGREGATE_WINDOW",
    "ALLOCATOR",
    "BATCH_IO_THREADS",
    "CLEANUP_TIMEOUT",
    "CONFIG_VARS",
    "CONNECT_TIMEOUT",
    "CUDA_IPC",
    "DISABLE_PLUGINS",
    "ENV_ALLOC_ID",
    "ENV_ALLOC_TRANSPORT",
    "ENV_AT_DEFAULT",
    "ENV_CLIENT_ADDR",
    "ENV_HOST_AGENT_ADDR",
    "ENV_HOST_AGENT_PID",
    "ENV_HOST_INDEX",
    "ENV_LAUNCHER_PID",
    "ENV_OWNER_ADDR",
    "ENV_PROC_COORDS",
    "ENV_PROC_ID",
    "ENV_PROC_MESH",
    "ENV_RANK_DIM",
    "ENV_RELAYED",
    "ENV_SECRET_FD",
    "ENV_SECRET_FILE",
    "ENV_SIZE_DIM",
    "ENV_SPANS_HOSTS",
    "ENV_SPMD_BACKEND",
    "ENV_SYS_PATH",
    "EVENT_LOG",
    "FORK_PROCS",
    "FORWARD_OUTPUT",
    "FROZEN_TIMEOUT",
    "HEARTBEAT_INTERVAL",
    "HOST_START_TIMEOUT",
    "HOST_TIMEOUT",
    "LAUNCH_VARS",
    "ORPHAN_TIMEOUT",
    "PLUGINS_STRICT",
    "PRELOAD",
    "PROC_START_TIMEOUT",
    "RDMA_BACKEND",
    "RDMA_FALLBACK",
    "RDMA_TCP_CHUNK_SIZE",
    "RDMA_TCP_WINDOW",
    "RELAY_MIN",
    "SETTINGS",
    "SHM_MIN_BYTES",
    "SHM_PAYLOADS",
    "SHM_POOL_BYTES",
    "SPIN_US",
    "STANDBY",
    "STOP_TIMEOUT",
    "TELEMETRY_DIR",
    "TELEMETRY_DISK_MB",
    "TELEMETRY_ROWS",
    "TELEMETRY_STORE",
    "TEST_SETTINGS",
    "TEST_SLOWDOWN",
    "TRACE_EXPORT",
    "TRACE_FILE",
    "TRACE_SAMPLE",
    "TRANSPORT",
    "LaunchVar",
    "Setting",
    "Source",
    "at_default",
    "clear_runtime_config",
    "config_env",
    "configure",
    "configured",
    "display",
    "env_float",
    "get_global_config",
    "get_runtime_config",
    "known_settings",
    "plugin_settings",
    "source",
]


# ------------------------------------------------------------------ the settings


def _seconds(key: str, default: float, doc: str) -> Setting[float]:
    return Setting(key, f"TETRARCH_{key.upper()}", float, default, doc, unit="seconds")


HOST_START_TIMEOUT = _seconds("host_start_timeout", 60.0, "seconds a host agent may take to connect back")
PROC_START_TIMEOUT = _seconds("proc_start_timeout", 60.0, "seconds a proc may take to report ready")
STOP_TIMEOUT = _seconds("stop_timeout", 10.0, "seconds a graceful stop may take before processes are killed")
CONNECT_TIMEOUT = _seconds("connect_timeout", 10.0, "seconds to dial and authenticate a peer")
CLEANUP_TIMEOUT = _seconds("cleanup_timeout", 5.0, "seconds an actor's `__cleanup__` may run during a stop")
HEARTBEAT_INTERVAL = _seconds(
    "heartbeat_interval", 1.0, "seconds between a proc's (or host agent's) pings of its owner"
)
ORPHAN_TIMEOUT = _seconds(
    "orphan_timeout", 30.0,
    "seconds a running proc or host agent waits for an answer to its pings before it exits as an orphan "
    "(a stall of its own restarts the wait)",
)
FROZEN_TIMEOUT = _seconds(
    "frozen_timeout", 8.0,
    "seconds a proc may stay stopped (SIGSTOP, a debugger) before its host agent reports it frozen to its "
    "owner and kills it (`inf`: never)",
)
HOST_TIMEOUT = _seconds(
    "host_timeout", 10.0,
    "seconds a host agent may send no heartbeat before its launcher declares it unreachable (a network cut, or a "
    "frozen host) and fails every call to the procs on it",
)
TRANSPORT: Setting[str | None] = Setting(
    "transport", "TETRARCH_TRANSPORT", str, None,
    "transport backend (see `tetrarch plugins`); unset: by address scheme, then priority. "
    "Host agents and procs always use their client's transport (`TETRARCH_ALLOC_TRANSPORT`)",
    propagate=False,  # the runtime passes the transport actually in use, not this setting
)
LISTEN_ADDRESS: Setting[str | None] = Setting(
    "listen_address", "TETRARCH_LISTEN_ADDRESS", str, None,
    "where the client listens, e.g. `tcp://127.0.0.1:0`; a qualified scheme (`zmq+tcp://...`) also selects the "
    "transport (below `transport`, which it must not contradict); unset: the transport's default address",
    propagate=False,  # procs and host agents listen on their transport's default address
)
ALLOCATOR: Setting[str | None] = Setting(
    "allocator", "TETRARCH_ALLOCATOR", str, None,
    "allocator backend that starts host agents for jobs (tetrarch.job) and this_host(), which refuses one "
    "without 'same-host'; unset: chosen by hooks, then priority",
)
RDMA_BACKEND: Setting[str | None] = Setting(
    "rdma_backend", "TETRARCH_RDMA_BACKEND", str, None,
    "RDMA backend; unset: the available one of highest priority",
)
DISABLE_PLUGINS: Setting[tuple[str, ...]] = Setting(
    "disable_plugins", "TETRARCH_DISABLE_PLUGINS", tuple, (),
    "entry point or distribution names whose plugins are skipped (read when the plugin registry loads)",
)
PLUGINS_STRICT: Setting[bool] = Setting(
    "plugins_strict", "TETRARCH_PLUGINS_STRICT", bool, False,
    "a plugin that fails to load raises PluginLoadError instead of being listed as broken",
)
STANDBY: Setting[bool] = Setting(
    "standby", "TETRARCH_STANDBY", bool, True,
    "a proc's first actor reads its own calls while idle (one thread wake-up per call instead of two; "
    "read by each proc when that actor starts; docs/performance.md has the trade-off)",
)
SPIN_US: Setting[int] = Setting(
    "spin_us", "TETRARCH_SPIN_US", int, 200,
    "how long a thread waiting for one reply (Future.get of a call_one, choose or single-actor call), and an "
    "idle actor whose calls come back to back, poll for the next message before they sleep: one within that "
    "time skips a thread wake-up, at the cost of up to that much CPU per wait; 0: never poll (read by each "
    "process when its runtime starts; docs/performance.md)",
    unit="microseconds",
)
RELAY_MIN: Setting[int] = Setting(
    "relay_min", "TETRARCH_RELAY_MIN", int, 16,
    "a call, broadcast or stream to a mesh goes through the host agent of each host that has at least this "
    "many of its actors (one message per host each way, replies gathered there) instead of one message per "
    "actor; 0: never (docs/performance.md, \"Mesh calls through per-host relays\")",
    unit="actors",
)
ADMIN: Setting[bool] = Setting(
    "admin", "TETRARCH_ADMIN", bool, False,
    "the client serves the admin API (hosts, procs, actors, meshes, failures; `tetrarch ps`) once its runtime "
    "starts; docs/observability.md",
)
ADMIN_HOST: Setting[str] = Setting(
    "admin_host", "TETRARCH_ADMIN_HOST", str, "127.0.0.1",
    "the address the admin server binds; one other than loopback is taken only when set here (or "
    "`admin.serve(host=..., allow_remote=True)`)",
)
ADMIN_PORT: Setting[int] = Setting(
    "admin_port", "TETRARCH_ADMIN_PORT", int, 0,
    "the admin server's TCP port; 0: a free one (the CLI finds it in the announcement file)",
)
ADMIN_DIR: Setting[str] = Setting(
    "admin_dir", "TETRARCH_ADMIN_DIR", str, "",
    "the folder of the admin servers' announcement files (URL and token, 0600); empty: "
    "$XDG_RUNTIME_DIR/tetrarch/admin, else ~/.cache/tetrarch/admin",
)
METRICS: Setting[bool] = Setting(
    "metrics", "TETRARCH_METRICS", bool, False,
    "every process exports its actors' calls, time in handlers and mailboxes and its memory and CPU through "
    "OpenTelemetry's OTLP exporter, configured by the standard OTEL_* variables (docs/telemetry.md)",
)
EVENT_LOG: Setting[str] = Setting(
    "event_log", "TETRARCH_EVENT_LOG", str, "",
    "lifecycle events (hosts, procs, meshes, actors, failures with their root cause) as one line each on "
    "stderr: `json` or `text`; empty: only to the application's own handlers of the `tetrarch.events` "
    "loggers (docs/telemetry.md)",
)
TRACE_SAMPLE: Setting[float] = Setting(
    "trace_sample", "TETRARCH_TRACE_SAMPLE", float, 0.0,
    "the fraction of calls and spawns traced (0 to 1; 0: tracing off): spans of send, receive and handle, "
    "linked across processes; a traced call's nested calls are traced too (docs/telemetry.md)",
)
TRACE_FILE: Setting[str] = Setting(
    "trace_file", "TETRARCH_TRACE_FILE", str, "",
    "write every process's spans to this Perfetto trace file when the program ends (trace_sample 1 "
    "unless set); `tetrarch trace -- python prog.py` sets it (docs/telemetry.md)",
)
TRACE_EXPORT: Setting[str] = Setting(
    "trace_export", "TETRARCH_TRACE_EXPORT", str, "",
    "`otlp`: every process exports its spans through OpenTelemetry's OTLP exporter, configured by the "
    "standard OTEL_* variables (trace_sample 1 unless set); empty: spans go only to the trace file and the "
    "telemetry store",
)
TELEMETRY_STORE: Setting[bool] = Setting(
    "telemetry_store", "TETRARCH_TELEMETRY_STORE", bool, True,
    "each host agent keeps its procs' lifecycle events, spans and metric points for SQL "
    "(job.telemetry.query, `tetrarch query`), within telemetry_rows and telemetry_disk_mb",
)
TELEMETRY_ROWS: Setting[int] = Setting(
    "telemetry_rows", "TETRARCH_TELEMETRY_ROWS", int, 100_000,
    "rows per table a host's telemetry store keeps in memory; older rows rotate to telemetry_dir",
)
TELEMETRY_DIR: Setting[str] = Setting(
    "telemetry_dir", "TETRARCH_TELEMETRY_DIR", str, "",
    "the folder of the telemetry stores' files, one folder per run in it (rows rotated out of memory, as "
    "Parquet, and those a job held at its end); empty: $XDG_RUNTIME_DIR/tetrarch/telemetry, else "
    "~/.cache/tetrarch/telemetry",
)
TELEMETRY_DISK_MB: Setting[int] = Setting(
    "telemetry_disk_mb", "TETRARCH_TELEMETRY_DISK_MB", int, 256,
    "megabytes of rotated telemetry a host keeps on disk; the oldest files go first",
)
BATCH_IO_THREADS: Setting[bool] = Setting(
    "batch_io_threads", "TETRARCH_BATCH_IO_THREADS", bool, True,
    "libzmq's and nng's own threads run under SCHED_BATCH: a thread that hands them a message is not "
    "preempted by them in the middle of it (read when a transport starts; docs/performance.md)",
)
RDMA_FALLBACK: Setting[bool] = Setting(
    "rdma_fallback", "TETRARCH_RDMA_FALLBACK", bool, True,
    "RDMA may fall back to core's backends when no hardware backend is usable (warns once)",
)
RDMA_TCP_CHUNK_SIZE: Setting[int] = Setting(
    "rdma_tcp_chunk_size", "TETRARCH_RDMA_TCP_CHUNK_SIZE", int, 4 << 20,
    "bytes per message of the RDMA TCP fallback (a transfer streams as many chunks as it needs)", unit="bytes",
)
RDMA_TCP_WINDOW: Setting[int] = Setting(
    "rdma_tcp_window", "TETRARCH_RDMA_TCP_WINDOW", int, 8,
    "chunks of one RDMA TCP fallback write that may be unacknowledged at once",
)
FORK_PROCS: Setting[bool] = Setting(
    "fork_procs", "TETRARCH_FORK_PROCS", bool, True,
    "procs start as forks of a per-host template process (the zygote) that imported tetrarch and the "
    "`preload` modules; 0: each proc is a fresh interpreter (docs/architecture.md, \"Procs that start "
    "like forks\", says when forking is wrong)",
)
PRELOAD: Setting[tuple[str, ...]] = Setting(
    "preload", "TETRARCH_PRELOAD", tuple, (),
    "modules the zygote imports once, so every proc forked from it starts with them imported "
    "(e.g. `torch,numpy`; `spawn_procs(preload=...)` adds to them)",
)
FORWARD_OUTPUT: Setting[bool] = Setting(
    "forward_output", "TETRARCH_FORWARD_OUTPUT", bool, True,
    "procs' stdout and stderr reach the client line by line, prefixed with mesh and rank (`0`: unprefixed, "
    "through their host agent's own stdout and stderr); see `ProcMesh.logging_option`",
)
AGGREGATE_WINDOW = _seconds(
    "aggregate_window", 0.0,
    "window in which identical lines from many procs print once with a count (`0`: every line, no folding)",
)
SHM_PAYLOADS: Setting[bool] = Setting(
    "shm_payloads", "TETRARCH_SHM_PAYLOADS", bool, True,
    "large arguments and results between processes of one host go through shared memory (0: the socket)",
)
SHM_MIN_BYTES: Setting[int] = Setting(
    "shm_min_bytes", "TETRARCH_SHM_MIN_BYTES", int, 512 << 10,
    "a message whose arrays, tensors and large bytes total at least this goes through shared memory",
    unit="bytes",
)
SHM_POOL_BYTES: Setting[int] = Setting(
    "shm_pool_bytes", "TETRARCH_SHM_POOL_BYTES", int, 4 << 30,
    "shared memory one process keeps for payloads, idle and held by receivers (past it: the socket, warned once)",
    unit="bytes",
)
CUDA_IPC: Setting[bool] = Setting(
    "cuda_ipc", "TETRARCH_CUDA_IPC", bool, True,
    "CUDA tensors of 1 MiB and more go by CUDA IPC handle to a process of the same host that sees their GPU "
    "(0: through host memory)",
)
TEST_SLOWDOWN: Setting[float] = Setting(
    "test_slowdown", "TETRARCH_TEST_SLOWDOWN", float, 1.0,
    "multiplies the time bounds of tetrarch's own test suite", propagate=False,
)
FUZZ_EXAMPLES: Setting[int] = Setting(
    "fuzz_examples", "TETRARCH_FUZZ_EXAMPLES", int, 100,
    "hostile inputs per transport that tetrarch's own fuzz test throws at a listening proc (more: runs longer)",
    propagate=False,
)

#: Every user setting by key, in documentation order.
SETTINGS: Mapping[str, Setting[Any]] = MappingProxyType({
    s.key: s
    for s in (
        HOST_START_TIMEOUT, PROC_START_TIMEOUT, STOP_TIMEOUT, CONNECT_TIMEOUT, CLEANUP_TIMEOUT,
        HEARTBEAT_INTERVAL, ORPHAN_TIMEOUT, FROZEN_TIMEOUT, HOST_TIMEOUT, TRANSPORT, LISTEN_ADDRESS, ALLOCATOR,
        RDMA_BACKEND,
        DISABLE_PLUGINS, PLUGINS_STRICT, RDMA_FALLBACK, RDMA_TCP_CHUNK_SIZE, RDMA_TCP_WINDOW, FORWARD_OUTPUT,
        FORK_PROCS, PRELOAD, STANDBY, SPIN_US, RELAY_MIN, BATCH_IO_THREADS, AGGREGATE_WINDOW, SHM_PAYLOADS,
        SHM_MIN_BYTES, SHM_POOL_BYTES, CUDA_IPC, ADMIN, ADMIN_HOST, ADMIN_PORT, ADMIN_DIR, EVENT_LOG, METRICS,
        TRACE_SAMPLE, TRACE_FILE, TRACE_EXPORT, TELEMETRY_STORE, TELEMETRY_ROWS, TELEMETRY_DIR, TELEMETRY_DISK_MB,
    )
})

#: The settings of tetrarch's own test suite: set like the others, listed apart (not for production).
TEST_SETTINGS: Mapping[str, Setting[Any]] = MappingProxyType({s.key: s for s in (TEST_SLOWDOWN, FUZZ_EXAMPLES)})

#: The variables of core's settings that :func:`config_env` may pass to procs (plugins' add to them).
CONFIG_VARS = tuple(s.env for s in SETTINGS.values() if s.propagate)


def known_settings() -> dict[str, Setting[Any]]:
    """Every setting by key: core's (``SETTINGS``), those the installed plugins declare (loads the
    plugin registry), then the test suite's (``TEST_SETTINGS``)."""
    return {**SETTINGS, **{key: s for key, (_, s) in plugin_settings().items()}, **TEST_SETTINGS}


def core_or_known(keys: Collection[str]) -> Mapping[str, Setting[Any]]:
    """Core's and the test suite's settings when they hold every key (no registry needed), else
    :func:`known_settings`."""
    if all(k in SETTINGS or k in TEST_SETTINGS for k in keys):
        return {**SETTINGS, **TEST_SETTINGS}
    return known_settings()


# ------------------------------------------------------------------ values set from code

_lock = threading.Lock()
_probe_generation = 0  # bumped when a ``probed`` setting changes from code


def probe_generation() -> int:
    """A number that changes whenever :func:`configure` changes a setting a probe reads.

    The plugin registry keeps its probes' answers until it does.
    """
    return _probe_generation


def _staged(caller: str, values: Mapping[str, object]) -> dict[str, Any]:
    """``values`` (Monarch's names translated) validated: key -> coerced value, or ``_UNSET`` for None (drop it)."""
    known = core_or_known(values)
    values = translate(caller, values, known)
    known = core_or_known(values)  # a Monarch name may stand for a plugin's setting
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ArgumentTypeError(f"{caller}() got unknown setting(s) {_with_hints(unknown, known)}; valid: "
                                f"{', '.join(known)}, or Monarch's names (docs/configuration.md#monarch-names)")
    return {k: _UNSET if v is None else known[k].coerce(v) for k, v in values.items()}


def _with_hints(names: list[str], settings: Mapping[str, Setting[Any]]) -> str:
    """``names``, each followed by the plugin that would declare it, or the nearest known name."""
    known = [*settings, *MONARCH_ALIASES, *MONARCH_REFUSED]
    hinted = []
    for name in names:
        owner = absent_owner(name)
        near = closest(name, known)
        hinted.append(f"{name} ({owner})" if owner else f"{name} (did you mean {near}?)" if near else name)
    return ", ".join(hinted)


def _apply(staged: Mapping[str, Any]) -> dict[str, Any]:
    """Install ``staged`` (under the lock); returns the values it replaced (``_UNSET``: none)."""
    global _probe_generation
    with _lock:
        new = dict(CODE.values)
        previous = {k: new.get(k, _UNSET) for k in staged}
        for key, value in staged.items():
            if value is _UNSET:
                new.pop(key, None)
            else:
                new[key] = value
        known = core_or_known(staged)
        if any(known[k].probed and new.get(k, _UNSET) != CODE.values.get(k, _UNSET) for k in staged):
            _probe_generation += 1
        CODE.values = new
    return previous


def configure(**values: object) -> None:
    """Set settings for this process from code, e.g. ``configure(stop_timeout=30)``.

    A value set from code beats the environment variable and the default, and
    settings that propagate reach procs spawned afterwards (:func:`config_env`).
    Values are validated as the environment's are (text is parsed the same way);
    ``None`` drops a value set from code. Nothing is set unless every value is valid.
    Monarch's names set the setting they stand for (``mesh_orphan_timeout="60s"`` sets
    ``orphan_timeout``; docs/configuration.md, "Monarch names").

    Raises:
        TypeError: an unknown key (the message suggests the nearest known name and lists
            the valid ones), or a value of the wrong type.
        ValueError: a value that is not valid for its setting; a Monarch name tetrarch has
            no setting for (the message says what to do instead); two names for one setting.
    """
    _apply(_staged("configure", values))


@contextmanager
def configured(**values: object) -> Iterator[Mapping[str, Any]]:
    """:func:`configure` for the ``with`` block; the previous values set from code come back on exit.

    Yields the configuration as Monarch's ``configured`` does: a read-only mapping of every
    setting by key and by Monarch's names (as :func:`get_global_config`), each read when
    accessed. Restores also when the block raises; blocks nest. Threads share the values:
    one thread's block is seen by the others while it lasts.

    Raises:
        TypeError, ValueError: as :func:`configure` (on entry; nothing is set).
    """
    previous = _apply(_staged("configured", values))
    try:
        yield _ConfigView()
    finally:
        _apply(previous)


class _ConfigView(Mapping[str, Any]):
    """Every setting's current value by key and by Monarch's names, read on access.

    Raises:
        KeyError: (on ``view[name]``) no such key or Monarch name.
        ValueError: (on ``view[name]``) its environment variable holds no valid value.
    """

    __slots__ = ()

    def __getitem__(self, name: str) -> Any:
        known = known_settings()
        alias = MONARCH_ALIASES.get(name)
        if name not in known and (alias is None or alias.key not in known):
            raise KeyError(name)
        setting, shown = _setting_named(name)
        return setting() if shown is None else shown(setting())

    def _names(self) -> list[str]:
        known = known_settings()
        return [*known, *(n for n, a in MONARCH_ALIASES.items() if n not in known and a.key in known)]

    def __iter__(self) -> Iterator[str]:
        yield from self._names()

    def __len__(self) -> int:
        return len(self._names())


def _setting_named(name: str) -> tuple[Setting[Any], Any]:
    """The setting ``name`` (a key or a Monarch name) reads, and how its value is shown under that name."""
    alias = MONARCH_ALIASES.get(name)
    known = core_or_known([name] if alias is None else [name, alias.key])
    if name in known:
        return known[name], None
    if alias is not None and alias.key in known:
        return known[alias.key], alias.to_theirs
    if name in MONARCH_REFUSED:
        raise ConfigError(f"Monarch's setting {name!r} has no tetrarch equivalent: {MONARCH_REFUSED[name]}")
    owner = absent_owner(alias.key if alias is not None else name)
    near = closest(name, [*known, *MONARCH_ALIASES])
    why = f" ({owner})" if owner else f" (did you mean {near}?)" if near else ""
    raise ConfigError(f"unknown setting {name!r}{why}; valid: "
                      f"{', '.join(known)}, or Monarch's names (docs/configuration.md#monarch-names)")


def source(key: str) -> Source:
    """Where the setting ``key``'s value comes from: ``"code"``, ``"environment"`` or ``"default"``.

    ``key`` may be a Monarch name (``mesh_orphan_timeout``: the source of ``orphan_timeout``).

    Raises:
        ValueError: an unknown key (the message suggests the nearest one and lists the valid
            ones), or a Monarch name tetrarch has no setting for.
    """
    return _setting_named(key)[0].source()


def get_global_config() -> dict[str, Any]:
    """Every setting's current value (code > environment > default) by key, and by Monarch's names.

    A Monarch name shows the value as Monarch would (durations as ``"1m 30s"``,
    ``rdma_max_chunk_size_mb`` in MiB); a name both use (``cleanup_timeout``) shows
    tetrarch's value. The dict is a snapshot: changing it changes nothing.

    Raises:
        ValueError: an environment variable holds no valid value (names it).
    """
    return dict(_ConfigView())


def get_runtime_config() -> dict[str, Any]:
    """The values set from code (:func:`configure`), by key: ``configure(**get_runtime_config())`` restores them."""
    return dict(CODE.values)


def clear_runtime_config() -> None:
    """Drop every value set from code; the environment variables and defaults apply again."""
    _apply(dict.fromkeys(CODE.values, _UNSET))


def config_env(*, complete: bool = False, overrides: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The variables to give procs spawned now: each propagating setting not at its default, rendered;
    ``complete``: also ``TETRARCH_AT_DEFAULT``, naming those at their defaults. ``overrides``
    (key -> value) are values for these procs only, as if set from code for them.

    Raises:
        ValueError: such a setting's environment variable holds no valid value.
    """
    env = {}
    defaults = []
    for setting in known_settings().values():
        if setting.propagate:
            value, where = setting.lookup()
            if overrides and setting.key in overrides:
                value, where = overrides[setting.key], "code"
            if where != "default":
                env[setting.env] = setting.render(value)
            else:
                defaults.append(setting.env)
    if complete:
        env[ENV_AT_DEFAULT.name] = " ".join(defaults)
    return env


def at_default(env: dict[str, str]) -> dict[str, str]:
    """``env`` without the variables its ``TETRARCH_AT_DEFAULT`` names (and without that marker)."""
    for name in env.pop(ENV_AT_DEFAULT.name, "").split():
        env.pop(name, None)
    return env


def env_float(name: str, default: float) -> float:
    """``float(os.environ[name])``, or ``default`` when unset or blank; for a variable that is no setting.

    Raises:
        ValueError: the variable is set but not a number (names the variable and its value).
    """
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    return STOP_TIMEOUT.parse(raw, origin=f"environment variable {name}={raw!r}")  # any seconds setting parses


def display(setting: Setting[Any], value: object) -> str:
    """``value`` for people: the environment text, ``(auto)`` for an unset choice, ``(none)`` for no names."""
    if value is None:
        return "(auto)"
    if value == ():
        return "(none)"
    return str(value).lower() if isinstance(value, bool) else setting.render(value)
