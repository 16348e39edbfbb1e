"""One error tree: every error tetrarch exports derives from TetrarchError and keeps its builtin parent."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tetrarch
from kernel_actors import Counter
from tetrarch import (
    ArgumentError,
    EndpointNotFoundError,
    MeshKeyError,
    NotOwnerError,
    SupervisionError,
    TetrarchError,
    this_host,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "errors.md"
EXPORTED = sorted(n for n in tetrarch.__all__ if isinstance(getattr(tetrarch, n), type)
                  and issubclass(getattr(tetrarch, n), BaseException))

#: Builtin parents kept for code written before the tree existed.
PARENTS = {
    "SupervisionError": RuntimeError, "ProcessStartError": RuntimeError, "AllocatorError": RuntimeError,
    "MeshStoppedError": RuntimeError, "UsageError": RuntimeError, "NotOwnerError": (ValueError, RuntimeError),
    "ArgumentError": ValueError, "ConfigError": ValueError, "ArgumentTypeError": TypeError,
    "EndpointNotFoundError": AttributeError, "MeshKeyError": KeyError, "MeshIndexError": IndexError,
    "FutureTimeoutError": TimeoutError, "NotSupportedError": NotImplementedError,
}


@pytest.mark.parametrize("name", EXPORTED)
@pytest.mark.transport_independent  # pure: no process
def test_every_exported_error_is_a_tetrarch_error(name: str) -> None:
    cls = getattr(tetrarch, name)
    assert issubclass(cls, TetrarchError)
    parents = PARENTS.get(name, ())
    for parent in parents if isinstance(parents, tuple) else (parents,):
        assert issubclass(cls, parent), f"{name} lost its builtin parent {parent.__name__}"


@pytest.mark.transport_independent  # pure: no process
def test_transport_and_plugin_errors_join_the_tree() -> None:
    from tetrarch._runtime.router._router import PeerUnreachable
    from tetrarch._transport._auth import AuthError
    from tetrarch._transport._base import ConnectionClosed, TransportError
    from tetrarch.plugins import BackendNotFound, BackendUnavailable, PluginLoadError

    for cls, parent in [(TransportError, OSError), (ConnectionClosed, OSError), (PeerUnreachable, ConnectionError),
                        (AuthError, ConnectionError), (BackendNotFound, LookupError),
                        (BackendUnavailable, RuntimeError), (PluginLoadError, RuntimeError)]:
        assert issubclass(cls, TetrarchError) and issubclass(cls, parent), cls


@pytest.mark.transport_independent  # pure: no process
def test_docs_list_every_error() -> None:
    text = DOCS.read_text()
    documented = set(re.findall(r"`(\w+(?:Error|Exception|Unavailable|NotFound|Closed|Unreachable))`", text))
    missing = [n for n in EXPORTED if n not in documented]
    assert not missing, f"docs/errors.md does not describe {missing}"


def test_not_the_owner_is_one_error_everywhere(procs) -> None:
    mesh = procs.spawn("owned_errors", Counter, 0)
    try:
        with pytest.raises(NotOwnerError, match="only its owner"):
            mesh.slice(gpus=0).stop()
        with pytest.raises(NotOwnerError, match="must be stopped by its owner"):
            procs.slice(gpus=0).stop()
        with pytest.raises(NotOwnerError, match="reference or slice"):
            this_host().slice().shutdown()
    finally:
        mesh.stop().get(timeout=30)


def test_user_mistakes_raise_tree_errors_with_their_builtin_parents(procs) -> None:
    mesh = procs.spawn("mistakes", Counter, 0)
    try:
        with pytest.raises(ArgumentError, match="exactly 1 actor"):
            mesh.value.call_one()
        with pytest.raises(EndpointNotFoundError, match="has no endpoint"):
            mesh.nope  # noqa: B018 - the attribute access is the test
        with pytest.raises(MeshKeyError):
            mesh.value.call().get(timeout=30).item(hosts=0)
        assert isinstance(SupervisionError("x"), RuntimeError)
    finally:
        mesh.stop().get(timeout=30)
