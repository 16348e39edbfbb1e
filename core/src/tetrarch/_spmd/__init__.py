"""torchrun-style SPMD programs on a proc mesh (the machinery behind ``tetrarch.spmd``).

``_env``     torchrun's environment variables, derived from a mesh coordinate (pure)
``_store``   the rendezvous TCPStore: bound by its owner on port 0, kept open (no free-port race)
``_target``  what ``SPMDActor.main`` runs (a script, ``-m module``, a callable) and how it ends
``_backend`` nccl or gloo, for the GPUs a proc sees
``_actor``   SPMDActor
``_setup``   setup_torch_elastic_env
"""

from __future__ import annotations

__all__: list[str] = []
