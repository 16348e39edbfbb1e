"""Jobs on disk: ``job.dump(path)`` / ``job_load(path)`` (Monarch's ``monarch.job`` persistence).

A dump is a pickle of the job, for a later process of the same user on the same
machine: it is written readable by its user only (0600; a folder it creates is 0700)
because it may say how to reach the job's hosts, and it is loaded only from a file
nobody else may write (a pickle runs code when loaded). Nothing from the network is
ever loaded this way.
"""

from __future__ import annotations

import os
import pickle
import stat

from ..._errors import ArgumentTypeError

__all__ = ["BATCH_ENV", "DEFAULT_JOB_PATH", "dump_job", "loads_checked", "read_dump"]

#: Where ``state()`` caches a job whose hosts outlive the client, and ``job_load()`` reads by default (Monarch's).
DEFAULT_JOB_PATH = ".monarch/job_state.pkl"
#: Set (to ``1``) in the environment of a client script a job runs in batch mode
#: (``job.apply(client_script=...)``): Monarch's name, so ported scripts that test it work.
BATCH_ENV = "MONARCH_BATCH_JOB"


def dump_job(data: bytes, path: str | os.PathLike[str]) -> None:
    """Write ``data`` (a pickled job) to ``path`` (following a symbolic link there), mode 0600.

    Raises:
        OSError: the file or its folder cannot be written.
    """
    path = os.fspath(path)
    if os.path.islink(path):
        path = os.path.realpath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, mode=0o700, exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o600)  # an existing file keeps its mode through O_TRUNC
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def loads_checked(data: bytes, where: str, kind: type) -> object:
    """The object pickled in ``data``, which must be a ``kind``. Only for bytes this user made: a pickle runs code.

    Raises:
        ArgumentTypeError: ``data`` is not bytes, or holds no ``kind``.
        pickle.UnpicklingError: ``data`` is no pickle.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ArgumentTypeError(f"job_loads() takes the bytes of job.dumps(), got {type(data).__name__}")
    obj = pickle.loads(data)  # the user's own dump, never bytes from the network
    if not isinstance(obj, kind):
        raise ArgumentTypeError(f"{where} holds a {type(obj).__name__}, not a job (a JobTrait's dump)")
    return obj


def read_dump(path: str | os.PathLike[str]) -> bytes:
    """The bytes of the dump at ``path``, checked to be the user's own and writable by the user only.

    Raises:
        FileNotFoundError: no such file.
        PermissionError: someone else owns the file or may write it (a planted pickle runs code).
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise PermissionError(f"refusing to load the job dump {path!r}: it must belong to you and be writable by "
                                  f"you only (it is a pickle, which runs code when loaded); chmod 600 {path}")
        return f.read()
