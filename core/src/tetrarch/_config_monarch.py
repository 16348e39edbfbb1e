"""Monarch's configuration names (``monarch.configure(...)``), mapped onto tetrarch's settings.

A Monarch program sets ``configure(mesh_orphan_timeout="60s", enable_log_forwarding=True)``.
:data:`MONARCH_ALIASES` maps each Monarch name that has a tetrarch setting onto it, with the
conversion its value needs (Monarch's durations are humantime strings such as ``"30s"``,
``"1m 30s"``, ``"500ms"``; a number of seconds is accepted too). :data:`MONARCH_REFUSED`
holds every other name of Monarch's ``configure`` with what to do in tetrarch instead; the
message of the error :func:`translate` raises is that text.

This module knows settings by key only (no import of :mod:`tetrarch._config`, which uses
it); ``tests/config/test_config_monarch.py`` checks that every key named here exists.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ._errors import ArgumentTypeError, ConfigError

__all__ = [
    "MONARCH_ALIASES", "MONARCH_REFUSED", "MonarchAlias", "closest", "format_duration", "parse_duration",
    "translate",
]

# ------------------------------------------------------------------ durations (humantime)

_UNITS = {
    "ns": 1e-9, "nsec": 1e-9, "us": 1e-6, "usec": 1e-6, "ms": 1e-3, "msec": 1e-3, "millis": 1e-3,
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0, "w": 604800.0, "week": 604800.0, "weeks": 604800.0,
}
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)")
#: What a duration looks like, for error messages.
DURATION_WORDS = "a duration such as '30s', '1m 30s' or '500ms'"


def parse_duration(text: str) -> float:
    """Seconds in a humantime duration (``"30s"``, ``"1h 30m"``, ``"500ms"``, ``"2min"``).

    Raises:
        ValueError: ``text`` is no such duration.
    """
    lowered, pos, total = text.strip().lower(), 0, 0.0
    while pos < len(lowered):
        match = _PART.match(lowered, pos)
        if match is None or match.group(2) not in _UNITS:
            raise ConfigError(f"{text!r} is not {DURATION_WORDS}")
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if not lowered:
        raise ConfigError(f"{text!r} is not {DURATION_WORDS}")
    return total


def format_duration(seconds: float) -> str:
    """``seconds`` as Monarch prints a duration (``"1m 30s"``, ``"500ms"``); ``"inf"`` for no bound."""
    if math.isinf(seconds):
        return "inf"
    nanos = round(seconds * 1e9)
    parts = []
    for unit, size in (("d", 86400 * 10**9), ("h", 3600 * 10**9), ("m", 60 * 10**9), ("s", 10**9),
                       ("ms", 10**6), ("us", 10**3), ("ns", 1)):
        count, nanos = divmod(nanos, size)
        if count:
            parts.append(f"{count}{unit}")
    return " ".join(parts) or "0s"


# ------------------------------------------------------------------ conversions


def _seconds(name: str, value: object) -> float:
    """A Monarch duration (humantime text) or a number of seconds, as seconds."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ArgumentTypeError(f"configure({name}={value!r}): expected {DURATION_WORDS} or a number of seconds, "
                                f"got {type(value).__name__}")
    try:
        seconds = parse_duration(value) if isinstance(value, str) and not _is_number(value) else float(value)
    except ValueError as exc:
        raise ConfigError(f"configure({name}={value!r}): {exc}") from None
    if seconds < 0:
        raise ConfigError(f"configure({name}={value!r}): a duration cannot be negative")
    return seconds


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _bounded_seconds(name: str, value: object) -> float:
    """As :func:`_seconds`, refusing Monarch's ``0`` = wait forever (tetrarch's bounds are finite)."""
    seconds = _seconds(name, value)
    if seconds == 0:
        raise ConfigError(f"configure({name}={value!r}): Monarch reads 0 as 'wait forever'; tetrarch needs a "
                          "bound: give a long one, e.g. '1h'")
    return seconds


def _boolean(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"configure({name}={value!r}): expected a boolean, got {type(value).__name__}")
    return value


def _mebibytes(name: str, value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"configure({name}={value!r}): expected an integer of MiB, got {type(value).__name__}")
    return value << 20


def _transport(name: str, value: object) -> object:
    if not isinstance(value, str):
        raise ArgumentTypeError(f"configure({name}={value!r}): expected a transport name ('tcp' or 'ipc'; "
                                f"tetrarch has no ChannelTransport enum), got {type(value).__name__}")
    lowered = value.strip().lower()
    if lowered in {"unix", "ipc"}:
        return "ipc"
    if lowered.startswith(("metatls", "tls", "quic", "metaquic")):
        raise ConfigError(f"configure({name}={value!r}): tetrarch has no TLS or QUIC transport; connections are "
                          "authenticated with a per-allocation secret instead (docs/architecture.md); use 'tcp' "
                          "across hosts or 'ipc' on one host")
    return "tcp" if lowered in {"tcp", "tcpwithhostname", "tcp_with_hostname"} else value


def _disable_ibverbs(name: str, value: object) -> object:
    return "tcp" if _boolean(name, value) else None  # False: the backend is chosen as usual


def _nic(name: str, value: object) -> object:
    if not isinstance(value, str) or not value.startswith("nic:") or not value[4:].strip():
        raise ConfigError(f"configure({name}={value!r}): tetrarch takes only the 'nic:<device>' form (e.g. "
                          "'nic:mlx5_0'), as rdma_device='<device>'; unset, it picks the NIC nearest the "
                          "process's GPU, as Monarch's 'gpu:<ordinal>' would")
    return value[4:].strip()


@dataclass(frozen=True, slots=True)
class MonarchAlias:
    """A Monarch ``configure`` name that sets the tetrarch setting ``key``.

    ``to_ours(name, value)`` converts Monarch's value (``None`` passes through: it drops
    the value set from code); ``to_theirs`` shows tetrarch's value in Monarch's form.
    """

    name: str  #: Monarch's keyword
    key: str  #: the tetrarch setting it sets
    to_ours: Callable[[str, object], object]
    to_theirs: Callable[[Any], object]
    note: str  #: Monarch's form of the value and how the meaning differs (for the docs)


def _duration(name: str, key: str, note: str, *, bounded: bool = False) -> MonarchAlias:
    return MonarchAlias(name, key, _bounded_seconds if bounded else _seconds, format_duration,
                        f"a duration ('30s', '1m 30s') or seconds; {note}")


_ALIASES = (
    MonarchAlias("default_transport", "transport", _transport, lambda v: v,
                 "'tcp', or 'ipc'/'unix' (Monarch's default); no ChannelTransport enum, no TLS/QUIC"),
    MonarchAlias("enable_log_forwarding", "forward_output", _boolean, lambda v: v,
                 "a boolean; Monarch's default is off, tetrarch's on (procs' lines reach the client, prefixed)"),
    _duration("host_spawn_ready_timeout", "proc_start_timeout", "Monarch's 0 (wait forever) is refused", bounded=True),
    _duration("mesh_proc_spawn_max_idle", "proc_start_timeout", "tetrarch bounds the whole start, not idle gaps"),
    _duration("process_exit_timeout", "stop_timeout", "one bound for the whole graceful stop"),
    _duration("stop_actor_timeout", "stop_timeout", "one bound for the whole graceful stop"),
    _duration("mesh_terminate_timeout", "stop_timeout", "one bound for the whole graceful stop"),
    _duration("proc_stop_max_idle", "stop_timeout", "one bound for the whole graceful stop"),
    _duration("cleanup_timeout", "cleanup_timeout", "same name; Monarch's default is 3s, tetrarch's 5s"),
    _duration("mesh_orphan_timeout", "orphan_timeout", "Monarch's default is 60s, tetrarch's 30s"),
    MonarchAlias("rdma_allow_tcp_fallback", "rdma_fallback", _boolean, lambda v: v, "a boolean, same meaning"),
    MonarchAlias("rdma_max_chunk_size_mb", "rdma_chunk_size", _mebibytes,
                 lambda v: v >> 20 if v % (1 << 20) == 0 else v / (1 << 20), "MiB; tetrarch's setting is in bytes"),
    MonarchAlias("rdma_disable_ibverbs", "rdma_backend", _disable_ibverbs, lambda v: v == "tcp",
                 "True sets rdma_backend='tcp' (what Monarch then uses), False unsets it; reads back "
                 "True while rdma_backend is 'tcp'"),
    MonarchAlias("rdma_ibverbs_target", "rdma_device", _nic, lambda v: None if v is None else f"nic:{v}",
                 "only 'nic:<device>'; 'cpu:'/'gpu:' forms are refused (unset picks the NIC nearest the GPU)"),
)

#: Monarch's name -> the alias, for every Monarch name tetrarch has a setting for.
MONARCH_ALIASES: Mapping[str, MonarchAlias] = MappingProxyType({a.name: a for a in _ALIASES})

_WIRE = "an internal of hyperactor's message channels; tetrarch's transports are plugins with nothing to tune here"
_LEGACY_ALLOC = ("belongs to Monarch's removed remote allocator; tetrarch starts hosts through allocator plugins "
                 "(`allocator` setting, tetrarch.job) and the client listens at `listen_address`")
_NO_TOKIO = "sizes a Tokio runtime; tetrarch has none (one asyncio loop per process)"
_NO_POLL = ("bounds Monarch's state polling; tetrarch does not poll: a proc's exit is reported by its host agent "
            "at once, a silent host after `host_timeout`")

#: Monarch's name -> why tetrarch has no such setting and what to do instead.
MONARCH_REFUSED: Mapping[str, str] = MappingProxyType({
    "message_delivery_timeout": (
        "tetrarch does not hold undelivered messages for re-sending: a call to a peer whose connection drops "
        "fails at once (SupervisionError); dialling a peer is bounded by `connect_timeout`, a silent host by "
        "`host_timeout`; bound a single call with `Future.get(timeout=...)`"),
    "enable_file_capture": (
        "tetrarch writes no per-host log files: procs' output reaches the client (`forward_output`); redirect "
        "the client's output, or use your launcher's log files (Slurm's --output)"),
    "tail_log_lines": (
        "tetrarch keeps a fixed tail of a proc's stderr for its exit report (ProcessStartError, MeshFailure); "
        "nothing to set"),
    "read_log_buffer": "tetrarch forwards procs' output line by line; there is no read buffer to size",
    "force_file_log": "tetrarch writes no log files; configure Python `logging` for the `tetrarch` loggers",
    "prefix_with_rank": (
        "procs' lines are prefixed with mesh and rank while `forward_output` is on; `forward_output=False` "
        "passes them unprefixed (see ProcMesh.logging_option)"),
    "codec_max_frame_length": "tetrarch has no message size limit to set (a message may be as large as memory)",
    "message_ack_time_interval": _WIRE,
    "message_ack_every_n_messages": _WIRE,
    "message_ttl_default": "tetrarch sends each message straight to its destination; there are no hops to count",
    "split_max_buffer_size": "replies are gathered at the caller, not reduced in the network; nothing to buffer",
    "split_max_buffer_age": "replies are gathered at the caller, not reduced in the network; nothing to buffer",
    "default_encoding": "tetrarch's wire is always pickle protocol 5 with out-of-band buffers; no choice to make",
    "channel_net_rx_buffer_full_check_interval": _WIRE,
    "channel_tcp_keepalive_idle": _WIRE,
    "channel_reconnect_timeout": f"{_WIRE}; dialling a peer is bounded by `connect_timeout`",
    "channel_tcp_congestion": _WIRE,
    "sequencer_max_locked_keys": _WIRE,
    "small_write_threshold": _WIRE,
    "message_latency_sampling_rate": "tetrarch records no per-message latency telemetry",
    "enable_dest_actor_reordering_buffer": "messages from one sender to one actor always arrive in order",
    "mesh_bootstrap_enable_pdeathsig": (
        "always on: same-host procs get a parent-death signal; others exit after `orphan_timeout`"),
    "mesh_terminate_concurrency": "a stop signals every proc of the mesh at once; `stop_timeout` bounds it",
    "shared_asyncio_runtime": "always one asyncio loop per process, shared by its actors' async endpoints",
    "actor_queue_dispatch": "an internal dispatch mode of Monarch's Python actors; tetrarch has one",
    "max_cast_dimension_size": "tetrarch's broadcasts have no per-dimension size limit to set",
    "actor_spawn_max_idle": (
        "spawning actors has no timeout in tetrarch: bound your wait with `mesh.initialized.get(timeout=...)`"),
    "get_actor_state_max_idle": _NO_POLL,
    "get_proc_state_max_idle": _NO_POLL,
    "supervision_watchdog_timeout": (
        "tetrarch watches hosts, not a controller's stream: `host_timeout` bounds a silent host agent, "
        "`orphan_timeout` a silent owner"),
    "terminated_snapshot_retention": "tetrarch keeps no post-mortem snapshots of stopped actors",
    "server_heartbeat_interval": "tetrarch emits no health metrics; procs ping their owner every `heartbeat_interval`",
    "forwarder_flush_timeout": "a stop drains procs' output within `stop_timeout`",
    "hyperactor_tls_cert": "tetrarch has no TLS: every connection proves a per-allocation secret (HMAC) instead",
    "hyperactor_tls_key": "tetrarch has no TLS: every connection proves a per-allocation secret (HMAC) instead",
    "hyperactor_tls_ca": "tetrarch has no TLS: every connection proves a per-allocation secret (HMAC) instead",
    "remote_alloc_bind_to_inaddr_any": _LEGACY_ALLOC,
    "remote_alloc_bootstrap_addr": _LEGACY_ALLOC,
    "remote_alloc_allowed_port_range": _LEGACY_ALLOC,
    "remote_allocator_heartbeat_interval": f"{_LEGACY_ALLOC}; host agents ping every `heartbeat_interval`",
    "mesh_admin_addr": "tetrarch has no admin HTTP server; `tetrarch config` and `tetrarch plugins` show its state",
    "mesh_attach_config_timeout": (
        "tetrarch pushes no config on attach: procs get the client's settings in their environment at spawn "
        "(docs/configuration.md, 'What reaches procs')"),
    "tokio_worker_threads": _NO_TOKIO,
    "rdma_runtime_worker_threads": _NO_TOKIO,
    "rdma_tcp_fallback_parallelism": (
        "the TCP fallback streams over the actor connection: `rdma_tcp_window` sets the chunks in flight, "
        "`rdma_tcp_chunk_size` their size"),
    "rdma_peer_device_affinity": "tetrarch pairs no NICs: `rdma_device` names the one this process uses",
})


# ------------------------------------------------------------------ translation


def closest(name: str, known: Collection[str]) -> str | None:
    """The name of ``known`` nearest to ``name`` (a misspelling), or None."""
    import difflib  # here: only a misspelt name needs it

    found = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return found[0] if found else None


def translate(caller: str, values: Mapping[str, object], keys: Collection[str]) -> dict[str, object]:
    """``values`` with each Monarch name replaced by the tetrarch key it sets and its value converted.

    A name in ``keys`` (tetrarch's own, e.g. ``cleanup_timeout``) and an unknown name are
    left as they are.

    Raises:
        ValueError: a Monarch name tetrarch refuses (the message says what to do instead), a
            value its conversion rejects, or two names that set the same setting.
        TypeError: a value of the wrong type for its Monarch name.
    """
    out: dict[str, object] = {}
    given: dict[str, str] = {}  # tetrarch key -> the name that set it
    for name, value in values.items():
        if name in MONARCH_REFUSED and name not in keys:
            raise ConfigError(f"{caller}({name}=...): Monarch's setting {name!r} has no tetrarch equivalent: "
                              f"{MONARCH_REFUSED[name]} (docs/configuration.md#monarch-names)")
        alias = MONARCH_ALIASES.get(name)
        key = alias.key if alias is not None and name not in keys else name
        if key in given:
            raise ConfigError(f"{caller}() got both {given[key]!r} and {name!r}, which both set tetrarch's "
                              f"{key!r}; pass one")
        given[key] = name
        out[key] = alias.to_ours(name, value) if key != name and value is not None and alias else value
    return out
