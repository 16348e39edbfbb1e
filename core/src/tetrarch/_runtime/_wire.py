"""Message kinds and header layouts.

Every message is ``[header, *payload]``: the header is a small tuple pickled with the
C pickler (only ints, strings and tuples of them), the payload is what
:func:`tetrarch._runtime._serial.dumps` produced (possibly empty).

* ``CALL``: ``(CALL, actor_key, method, reply_addr, reply_port, rank, labels, sizes, sender)``
  — ``rank`` is the receiver's index in the mesh slice the message was sent to, whose
  extent is ``labels``/``sizes``; ``reply_addr`` is None for ``broadcast``.
* ``PORT``: ``(PORT, port_id, tag, status)`` — a value (``OK``), an error (``ERR``) or
  a death notice (``DEAD``) for a port: a call's reply port or a user ``Channel``'s
  (:mod:`tetrarch._runtime._port`); ``tag`` is the sender's rank for gathered replies.
* ``SYS``: ``(SYS, service, op, reply_addr, reply_port)`` — control plane (spawn, stop,
  proc ready/exit) handled on the I/O thread by a registered service.
"""

from __future__ import annotations

import pickle
from typing import Any

__all__ = ["CALL", "ERR", "OK", "PORT", "SYS", "header", "read_header"]

CALL = 1
PORT = 2
SYS = 3

OK = 0
ERR = 1  # payload: an ActorError-like record (exception, traceback, actor, method)
DEAD = 2  # payload: a message saying why the target is gone (→ SupervisionError)


def header(*fields: Any) -> bytes:
    return pickle.dumps(fields, 5)


read_header = pickle.loads
