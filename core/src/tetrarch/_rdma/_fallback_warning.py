"""The ``tcp`` fallback's one warning: said once per process, when ``tcp`` carries a transfer (as Monarch).

Choosing a backend warns of nothing (``RDMABuffer(...)``, ``get_rdma_backend()``, the choice
of a transfer's backend: their registry requests say ``fallback_warning=False``, which keeps
the refusal of a disabled fallback); the same-host ``shm`` path is the best there is and is
never warned about. A transfer that this process starts over ``tcp`` warns once, in a line,
unless ``tcp`` was chosen on purpose (the ``rdma_backend`` setting).
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections.abc import Mapping
from types import FrameType

from .._config import RDMA_BACKEND
from .._errors import RDMATcpFallbackWarning
from .._plugins import BackendKind, SelectionRequest

__all__ = ["QUIET", "tcp_carries_a_transfer"]

#: The ``request`` of the frontend's ``registry.select(BackendKind.RDMA, ...)`` calls.
QUIET = SelectionRequest(BackendKind.RDMA, fallback_warning=False)

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_TESTING = _PACKAGE + "testing" + os.sep  # its actors stand for user code
_lock = threading.Lock()
_warned = False


def tcp_carries_a_transfer(contexts: Mapping[str, object]) -> None:
    """Warn (once per process) that a transfer with a buffer registered with ``contexts`` goes over ``tcp``."""
    global _warned
    if _warned or RDMA_BACKEND() == "tcp":
        return
    with _lock:
        if _warned:
            return
        _warned = True
    why = ("its owner registered it with 'tcp' only" if set(contexts) == {"tcp"} else
           f"no other backend its owner registered it with ({', '.join(sorted(set(contexts) - {'tcp'}))}) "
           f"reaches the owner from here")
    warnings.warn(f"tetrarch RDMA: a transfer goes over the slow 'tcp' fallback ({why}; `tetrarch doctor rdma` "
                  f"shows the backends here). Silence: warnings.filterwarnings('ignore', category=tetrarch.rdma."
                  f"RDMATcpFallbackWarning)", RDMATcpFallbackWarning, stacklevel=_first_frame_outside_tetrarch())


def _first_frame_outside_tetrarch() -> int:
    """The ``stacklevel`` of the innermost caller outside the tetrarch package (the user's line;
    ``tetrarch.testing``'s actors count as the user's)."""
    frame: FrameType | None = sys._getframe(1)  # tcp_carries_a_transfer's frame: stacklevel 1
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE) \
            and not frame.f_code.co_filename.startswith(_TESTING):
        frame, level = frame.f_back, level + 1
    return level if frame is not None else 1
