"""SPMD programs (torchrun-style, ``torch.distributed``) on a proc mesh, as Monarch's ``monarch.spmd``.

::

    from tetrarch import this_host
    from tetrarch.spmd import SPMDActor

    procs = this_host().spawn_procs(per_host={"gpus": 4})
    am = procs.spawn("spmd", SPMDActor)
    addr, port = am.slice(gpus=0).get_host_port.call_one(None).get()
    am.main.call(addr, port, ["train.py", "--epochs", "2"]).get()   # an unmodified torchrun script

or, for actors that call ``init_process_group("env://")`` themselves,
``setup_torch_elastic_env(procs)``. torch is needed only when these run, not to import
this module. See docs/spmd.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

_EXPORTS = {
    "SPMDActor": "tetrarch._spmd._actor",
    "RankExitError": "tetrarch._spmd._target",
    "RunAbortedError": "tetrarch._spmd._target",
    "pick_backend": "tetrarch._spmd._backend",
    "setup_torch_elastic_env": "tetrarch._spmd._setup",
    "setup_torch_elastic_env_async": "tetrarch._spmd._setup",
}

__all__ = [
    "RankExitError", "RunAbortedError", "SPMDActor", "pick_backend", "setup_torch_elastic_env",
    "setup_torch_elastic_env_async",
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS, __all__)

if TYPE_CHECKING:  # pragma: no cover
    from ._spmd._actor import SPMDActor
    from ._spmd._backend import pick_backend
    from ._spmd._setup import setup_torch_elastic_env, setup_torch_elastic_env_async
    from ._spmd._target import RankExitError, RunAbortedError
