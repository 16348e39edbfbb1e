"""Layer ``process``: wiring one process together (router + services) (see :mod:`tetrarch._runtime`)."""
