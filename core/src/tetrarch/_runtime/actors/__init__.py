"""Layer ``actors``: actors, their threads and the ``proc`` service that spawns them (see :mod:`tetrarch._runtime`)."""
