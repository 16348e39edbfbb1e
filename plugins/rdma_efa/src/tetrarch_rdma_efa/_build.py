"""The cffi binding to libfabric: compiled on first use into a cache directory, then loaded.

Why first use and not install time: the wheels stay pure Python (``make test-packaging``
builds every wheel with ``--no-build-isolation`` and needs no libfabric headers), an
installation on a machine without libfabric still succeeds and the probe then says what
is missing, and a worktree or editable checkout needs no reinstall after an edit. The
module is keyed by a hash of the C source, the declarations, the libfabric headers'
version and the interpreter's ABI, so an upgrade of any of them builds a fresh one; it
compiles once per machine and user (about 2 s) under a file lock, so procs that start
together build it once. The directory is
``$XDG_CACHE_HOME/tetrarch/efa`` (default ``~/.cache/tetrarch/efa``).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.machinery
import importlib.util
import os
import re
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path
from types import ModuleType

from tetrarch.rdma import RDMAError

__all__ = ["CDEF", "HEADERS", "INSTALL", "BuildError", "cache_dir", "load"]

INSTALL = "apt-get install libfabric1 libfabric-dev gcc libc6-dev; pip install cffi"
HEADERS = Path("/usr/include/rdma/fabric.h")

CDEF = """
struct tf_ep;
struct fid_mr;
int tf_open(const char *prov, int hmem, const char *node, struct tf_ep **out, const char **stage);
void tf_close(struct tf_ep *t);
const char *tf_prov_name(struct tf_ep *t);
const char *tf_fabric_name(struct tf_ep *t);
int tf_mr_mode(struct tf_ep *t);
size_t tf_mr_key_size(struct tf_ep *t);
size_t tf_max_msg_size(struct tf_ep *t);
size_t tf_tx_size(struct tf_ep *t);
int tf_has_hmem(struct tf_ep *t);
ssize_t tf_getname(struct tf_ep *t, void *buf, size_t len);
int tf_av_insert(struct tf_ep *t, const void *name, uint64_t *fi_addr);
int tf_av_remove(struct tf_ep *t, uint64_t fi_addr);
int tf_mr_reg(struct tf_ep *t, void *buf, size_t len, uint64_t access, uint64_t requested_key,
              int iface, int device, struct fid_mr **mr, uint64_t *key, void **desc);
int tf_mr_close(struct fid_mr *mr);
ssize_t tf_read(struct tf_ep *t, void *buf, size_t len, void *desc, uint64_t src, uint64_t addr, uint64_t key,
                void *ctx);
ssize_t tf_write(struct tf_ep *t, const void *buf, size_t len, void *desc, uint64_t dest, uint64_t addr,
                 uint64_t key, void *ctx);
ssize_t tf_cq_read(struct tf_ep *t, void **ctxs, size_t count);
int tf_cq_readerr(struct tf_ep *t, void **ctx, int *err, int *prov_errno, char *buf, size_t len);
int tf_cancel(struct tf_ep *t, void *ctx);
size_t tf_context_size(void);
const char *fi_strerror(int errnum);
uint32_t fi_version(void);
#define FI_READ ...
#define FI_WRITE ...
#define FI_REMOTE_READ ...
#define FI_REMOTE_WRITE ...
#define FI_MR_LOCAL ...
#define FI_MR_VIRT_ADDR ...
#define FI_MR_PROV_KEY ...
#define FI_MR_ALLOCATED ...
#define FI_MR_HMEM ...
#define FI_EAGAIN ...
#define FI_EAVAIL ...
#define FI_ENODATA ...
#define FI_HMEM_SYSTEM ...
#define FI_HMEM_CUDA ...
#define FI_HMEM_ROCR ...
"""


class BuildError(RDMAError):
    """The libfabric binding cannot be built or loaded here (the message names what is missing)."""


def cache_dir() -> Path:
    """Where compiled bindings are kept (``$XDG_CACHE_HOME/tetrarch/efa``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tetrarch" / "efa"


def _header_version() -> str:
    try:
        text = HEADERS.read_text()
    except OSError:
        return ""
    found = re.findall(r"#define FI_(MAJOR|MINOR|REVISION)_VERSION\s+(\d+)", text)
    return ".".join(v for _k, v in found)


def _source() -> str:
    return (Path(__file__).with_name("_shim.c")).read_text()


def _key(source: str) -> str:
    tag = sysconfig.get_config_var("SOABI") or sys.version
    digest = hashlib.sha256("\0".join((source, CDEF, _header_version(), tag)).encode()).hexdigest()
    return digest[:16]


_lock = threading.Lock()
_loaded: ModuleType | None = None


def load() -> ModuleType:
    """The compiled binding (``.ffi``, ``.lib``), built into :func:`cache_dir` if needed.

    Raises:
        BuildError: cffi is not installed, the libfabric headers are missing, or the
            compilation failed (the message names the packages to install).
    """
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = _load()
        return _loaded


def _load() -> ModuleType:
    if not HEADERS.exists():
        raise BuildError(f"the libfabric headers are missing ({HEADERS}); install them: {INSTALL}")
    source = _source()
    name = f"_tetrarch_fabric_{_key(source)}"
    directory = cache_dir()
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    target = directory / f"{name}{suffix}"
    if not target.exists():
        _compile(name, source, directory, target)
    spec = importlib.util.spec_from_file_location(name, target)
    if spec is None or spec.loader is None:
        raise BuildError(f"cannot load the compiled libfabric binding {target}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        raise BuildError(f"cannot load the compiled libfabric binding {target}: {exc}; delete it to rebuild, "
                         f"and check libfabric1 is installed ({INSTALL})") from exc
    return module


def _compile(name: str, source: str, directory: Path, target: Path) -> None:
    try:
        import cffi  # type: ignore[import-untyped]
    except ImportError as exc:
        raise BuildError(f"the efa backend needs cffi to build its libfabric binding: {INSTALL}") from exc
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be compiling the same module
        if target.exists():
            return
        ffi = cffi.FFI()
        ffi.cdef(CDEF)
        ffi.set_source(name, source, libraries=["fabric"])
        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            try:
                built = ffi.compile(tmpdir=tmp, verbose=False)
            except Exception as exc:
                raise BuildError(f"building the libfabric binding failed ({type(exc).__name__}: {exc}); it needs "
                                 f"a C compiler and the libfabric headers: {INSTALL}") from exc
            os.replace(built, target)  # atomic: a concurrent loader sees the whole file or none
