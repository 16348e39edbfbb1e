"""Layer ``plumbing``: children, secrets, stdio and shared memory, below any router (see :mod:`tetrarch._runtime`)."""
