"""Finding pyverbs: a regular install (PyPI's ``pyverbs``) or Debian's ``python3-pyverbs``.

Debian installs pyverbs into ``/usr/lib/python3/dist-packages``, which a virtualenv does
not see. Putting that whole folder on ``sys.path`` would shadow the virtualenv's own
packages with Debian's (numpy, yaml, ...), so the shim loads *only* the ``pyverbs``
package from there: it builds the package from its folder with ``importlib`` and puts it
in ``sys.modules``; nothing is added to ``sys.path``. pyverbs' compiled modules then find
their siblings (``pyverbs.base``, ...) through the package's ``__path__``.

Nothing here imports pyverbs at module level: :func:`locate` only looks at files.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading
from types import ModuleType

__all__ = ["DEBIAN_DIRS", "INSTALL", "PyverbsMissing", "import_pyverbs", "locate"]

#: Where Debian's python3-pyverbs puts the package (the first folder holding ``pyverbs``).
DEBIAN_DIRS = ("/usr/lib/python3/dist-packages",)
#: The two ways to get pyverbs, named in every "pyverbs missing" message.
INSTALL = ("install Debian's python3-pyverbs (`apt-get install python3-pyverbs`, found by tetrarch without "
           "PYTHONPATH) or PyPI's pyverbs (`pip install pyverbs`, an sdist that needs rdma-core's headers, "
           "libnl-3-dev, libnl-route-3-dev and cython<3.1)")

_lock = threading.Lock()


class PyverbsMissing(ImportError):
    """pyverbs cannot be imported here (the message names both ways to install it)."""


def locate() -> str | None:
    """Where pyverbs would come from: ``"python path"`` (importable as is), a Debian
    folder path, or None. Never imports it, never raises."""
    loaded = sys.modules.get("pyverbs")
    if loaded is not None:
        origin = os.path.dirname(os.path.dirname(getattr(loaded, "__file__", "") or ""))
        return origin if origin in DEBIAN_DIRS else "python path"
    try:
        if importlib.util.find_spec("pyverbs") is not None:
            return "python path"
    except Exception:  # noqa: BLE001 - a broken spec counts as absent here; import_pyverbs reports it
        pass
    for folder in DEBIAN_DIRS:
        if os.path.isfile(os.path.join(folder, "pyverbs", "__init__.py")):
            return folder
    return None


def _load_from(folder: str) -> ModuleType:
    package_dir = os.path.join(folder, "pyverbs")
    spec = importlib.util.spec_from_file_location(
        "pyverbs", os.path.join(package_dir, "__init__.py"), submodule_search_locations=[package_dir])
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["pyverbs"] = module
    try:
        spec.loader.exec_module(module)
        importlib.import_module("pyverbs.device")  # its compiled modules must load under this Python
    except BaseException:
        for name in [n for n in sys.modules if n == "pyverbs" or n.startswith("pyverbs.")]:
            del sys.modules[name]
        raise
    return module


def import_pyverbs() -> ModuleType:
    """The ``pyverbs`` package, imported (through the Debian shim when needed).

    Raises:
        PyverbsMissing: neither a regular install nor Debian's package is found, or the one
            found does not load under this Python (the message says which, and how to install).
    """
    with _lock:
        if "pyverbs" in sys.modules:
            return sys.modules["pyverbs"]
        where = locate()
        if where is None:
            raise PyverbsMissing(f"pyverbs is not installed (no module named 'pyverbs', and no Debian "
                                 f"python3-pyverbs in {', '.join(DEBIAN_DIRS)}); {INSTALL}")
        try:
            if where == "python path":
                module = importlib.import_module("pyverbs")
                importlib.import_module("pyverbs.device")
                return module
            return _load_from(where)
        except PyverbsMissing:
            raise
        except Exception as exc:
            origin = "the python path" if where == "python path" else f"Debian's python3-pyverbs in {where}"
            raise PyverbsMissing(f"pyverbs from {origin} does not load under Python "
                                 f"{sys.version_info.major}.{sys.version_info.minor} "
                                 f"({type(exc).__name__}: {exc}); {INSTALL}") from exc
