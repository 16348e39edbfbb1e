"""Layer ``programs``: entry points of the processes tetrarch starts (see :mod:`tetrarch._runtime`)."""
