"""Layer ``values``: plain data and pure functions, no runtime state (see :mod:`tetrarch._runtime`)."""
