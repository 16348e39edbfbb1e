"""RDMA: one-sided reads and writes of registered memory (``tetrarch.rdma`` is the public face).

``_backend``  the interface every RDMA backend implements (core's ``tcp`` and ``shm``, plugins')
"""
