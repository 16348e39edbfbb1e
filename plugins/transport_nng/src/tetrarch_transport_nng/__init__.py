"""tetrarch transport over pynng (backend ``nng``, addresses ``nng+tcp://``, ``nng+ipc://``).

Importing this package does not load pynng; the transport is
``tetrarch_transport_nng._nng:NngTransport`` (see its module docstring for the design).

Layers (a module imports only those below it):

* ``_plugin``: the entry point (featherweight: the spec and the probe);
* ``_nng``: the transport, dialing;
* ``_listen``: the listener (accepts itself, one nng socket per connection);
* ``_gate``: the bounds on connections before they open; ``_exit``: exit before ``nng_fini``;
* ``_conn``: one connection = one ``pair0`` socket, its framing, handing a descriptor to nng;
* ``testing`` (public): what tests of other distributions use to speak nng's wire to this transport.
"""

from __future__ import annotations

__all__: list[str] = []
