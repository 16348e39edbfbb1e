"""Ports are a service over a router: they work with two bare routers, no client runtime needed."""

from __future__ import annotations

import pytest

from tetrarch import SupervisionError
from tetrarch._runtime.router._router import Router
from tetrarch._runtime.services._port import PortReceiver, link_service
from tetrarch._runtime.values import _serial, _wire
from tetrarch._transport._socket import IpcTransport
from tetrarch.testing import scaled

# Pins the ipc transport itself (run once, not per transport).
pytestmark = [pytest.mark.transport_independent, pytest.mark.timeout(scaled(30))]


@pytest.fixture
def routers():
    ta, tb = IpcTransport(), IpcTransport()
    a, b = Router(ta, b"k" * 32, name="a"), Router(tb, b"k" * 32, name="b")
    yield a, b
    a.close()
    b.close()
    ta.close()
    tb.close()


def test_a_receiver_gets_values_and_errors_in_order_from_another_router(routers) -> None:
    a, b = routers
    receiver: PortReceiver[int] = PortReceiver(b)
    for value in (1, 2, 3):
        a.send(b.address, [_wire.port_header(receiver._port, 0, _wire.OK), *_serial.dumps(value)])
    a.send(b.address, [_wire.port_header(receiver._port, 0, _wire.DEAD), *_serial.dumps("sender went away")])
    assert [receiver.recv().get(timeout=scaled(5)) for _ in range(3)] == [1, 2, 3]
    with pytest.raises(SupervisionError, match="sender went away"):
        receiver.recv().get(timeout=scaled(5))


def test_a_linked_holders_death_reaches_the_receiver(routers) -> None:
    a, b = routers
    link_service(b)
    receiver: PortReceiver[int] = PortReceiver(b)
    a.send(b.address, [_wire.sys_header(_wire.SVC_PORT, "link", a.address, receiver._port)])
    a.send(b.address, [_wire.port_header(receiver._port, 0, _wire.OK), *_serial.dumps(7)])
    assert receiver.recv().get(timeout=scaled(5)) == 7
    b.mark_dead(a.address, "its process exited")
    with pytest.raises(SupervisionError, match="held this port died"):
        receiver.recv().get(timeout=scaled(5))
