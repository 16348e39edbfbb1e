"""Layer ``router``: one router per process: connections, authentication, dispatch (see :mod:`tetrarch._runtime`)."""
