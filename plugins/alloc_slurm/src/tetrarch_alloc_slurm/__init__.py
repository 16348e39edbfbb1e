"""tetrarch allocator whose hosts are the nodes of a Slurm job (backend ``slurm``).

Not implemented yet: ``tetrarch plugins`` reports it as ``not implemented`` (and whether
``sbatch`` and ``srun`` are there) and creating it raises :class:`NotImplementedError`.
"""

from __future__ import annotations

__all__: list[str] = []
