"""Layer ``meshes``: what users call: meshes, jobs, channels (see :mod:`tetrarch._runtime`)."""
