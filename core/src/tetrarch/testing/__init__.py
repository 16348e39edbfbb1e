"""Test helpers and test kits for tetrarch and its plugins.

Helpers (cheap to import; usable in tests and in the programs they start):

:func:`scaled` and :func:`slowdown`
    Every wall-clock bound in a test is written in nominal seconds and passed through
    ``scaled(seconds)``: the ``TETRARCH_TEST_SLOWDOWN`` environment variable (a positive
    float, default 1) multiplies them all, so a loaded machine can run the suite with
    one setting, e.g. ``TETRARCH_TEST_SLOWDOWN=3 pytest``.
:class:`Collector`
    A thread-safe list that callbacks add to and a test waits on
    (``collector.wait(n, timeout)``, the timeout scaled), instead of sleeping.
:func:`closed_now`, :func:`still_open`, :func:`raw_sockaddr`
    A stranger's raw sockets: whether the listener closed them, and how to dial an address.
:class:`PreAuthTarget` and :class:`PreAuthPeer`
    For a plugin's own tests of its stage before ``on_open`` (what strangers may cost a
    listener), without the kernel's private router: ``PreAuthTarget(factory, address,
    secret, timeout=T, max_pending=P, nofile=None)`` starts a child process whose kernel
    router listens at ``address`` on a transport built by ``factory`` (``"pkg.mod:Class"``)
    with ``auth_timeout=T`` and ``max_unauthenticated=P``; ``.address`` is where it listens,
    ``.served()`` / ``.wait_served(n, timeout)`` count the messages authenticated peers sent
    it, ``.pid``, ``.alive()``, ``.rss()``, ``.stderr()`` (its log) and ``.describe()`` (for
    an assertion message) observe it, ``.close()`` stops it. ``PreAuthPeer(factory, secret)``
    is such an authenticated peer: ``.send(address, text)`` sends a target one message
    (``ConnectionError`` if it cannot reach it), ``.close()``. Both are context managers;
    the kit's pre-auth tests (:mod:`tetrarch.testing._preauth`) are built on them.
:mod:`tetrarch.testing.scenario`
    Programs in fresh interpreters: ``run_scenario(path, *args, timeout=...)`` runs one to its
    end (bounded; stacks dumped and the test failed past the bound), ``Started`` starts them
    and kills what still runs in their process groups when closed, ``require_isolated``.
:func:`raise_open_file_limit`
    Raise this process's soft open-file limit to its hard limit and return it (what every
    tetrarch process does at start): a test that opens many sockets checks it first.

Kits: a kit is a class of pytest tests written against one of tetrarch's plugin
interfaces. A plugin's own test suite subclasses it and provides fixtures that build the
plugin's implementation; pytest then runs every contract test against it (in the spirit
of fsspec's ``fsspec.tests.abstract`` suites).

Transports (:class:`tetrarch.testing.transport.TransportConformance`)::

    # plugins/transport_foo/tests/test_conformance.py
    import pytest
    from tetrarch.testing.transport import TransportConformance
    from tetrarch_transport_foo._transport import FooTransport

    class TestFooTransport(TransportConformance):
        @pytest.fixture
        def transport(self):
            t = FooTransport()
            yield t
            t.close()

That is all: the subclass inherits the contract tests (connect, multi-frame messages
including empty and 16 MiB frames, ordering, concurrent senders, close semantics,
``max_message_size`` over the frames and over the header, abrupt and garbage clients,
dialing nobody, and what strangers may cost a listener before they authenticate:
deadline, count, memory, descriptors). Optional fixtures a subclass may override:

``address``
    Where to listen; defaults to ``transport.default_address(spans_hosts=False)``.
``client_transport``
    The transport that dials; defaults to ``transport`` itself. Return a second
    instance to check that the two sides share nothing but the wire.
``unused_address``
    An address nobody listens on; by default derived from ``address`` (a reserved,
    non-listening port for ``...:0`` addresses, else the fresh address itself).

and methods: ``raw_frame_count(transport, count)`` returns the bytes that open a
message of ``count`` frames on your wire (None, the default for a transport other than
the builtin one, skips the raw-socket check that a frame count alone whose header would
exceed ``max_message_size`` closes the connection); ``preauth_flood(address)``, the bytes
a stalled stranger sends your listener (default: the builtin framing's; see
:mod:`tetrarch.testing._preauth`).

The ``transport`` fixture must be function scoped (one fresh transport per test): a
test may close it. Every test is bounded (``pytest.mark.timeout(30)`` when
pytest-timeout is installed, which ``tetrarch[test]`` brings) and waits on events with
timeouts, never on sleeps.

Importing :mod:`tetrarch.testing` itself imports nothing heavy (no pytest); the kits
import pytest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tetrarch._transport._limits import raise_open_file_limit

from ._collector import Collector
from ._procs import still_running
from ._raw_sock import closed_now, raw_sockaddr, still_open
from ._timing import SLOWDOWN_ENV, scaled, slowdown

__all__ = ["SLOWDOWN_ENV", "Collector", "PreAuthPeer", "PreAuthTarget", "TransportConformance", "closed_now",
           "raise_open_file_limit", "raw_sockaddr", "scaled", "slowdown", "still_open", "still_running"]

if TYPE_CHECKING:  # pragma: no cover
    from ._preauth_target import Peer as PreAuthPeer
    from ._preauth_target import Target as PreAuthTarget
    from .transport import TransportConformance


def __getattr__(name: str) -> Any:
    if name == "TransportConformance":
        from .transport import TransportConformance

        return TransportConformance
    if name in ("PreAuthTarget", "PreAuthPeer"):  # subprocess, argparse, tempfile: only when asked for
        from . import _preauth_target

        return _preauth_target.Target if name == "PreAuthTarget" else _preauth_target.Peer
    raise AttributeError(f"module 'tetrarch.testing' has no attribute {name!r}")
