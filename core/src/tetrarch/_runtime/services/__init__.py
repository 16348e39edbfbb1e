"""Layer ``services``: what runs on a router, each handed it explicitly (see :mod:`tetrarch._runtime`)."""
