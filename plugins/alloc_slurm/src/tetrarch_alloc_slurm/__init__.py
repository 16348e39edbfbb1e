"""tetrarch allocator whose hosts are the nodes of a Slurm job (backend ``slurm``).

Not implemented yet: ``tetrarch plugins`` reports it as unavailable (after looking for
``sbatch`` and ``srun``) and creating it raises :class:`NotImplementedError`.
"""

from __future__ import annotations

__all__: list[str] = []
