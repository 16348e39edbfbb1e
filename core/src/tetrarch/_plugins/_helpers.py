"""Small helpers shared by plugins, so no two plugin distributions repeat code.

Everything here is cheap: finding a library never imports it.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Callable
from typing import Any

from .._config import SETTINGS, Setting, known_settings
from .._config_monarch import closest
from .._config_plugins import absent_owner
from .._errors import ConfigError
from . import _dists
from ._specs import ProbeResult

__all__ = ["library_probe", "module_present", "not_implemented_factory", "probe_in_child", "python_library_found",
           "setting"]


def setting(key: str) -> Setting[Any]:
    """The tetrarch setting ``key`` (``"stop_timeout"``; docs/configuration.md lists them), core's or one
    an installed plugin declares (``tetrarch_settings``; a plugin reads its own through the
    :class:`Setting` it declared, and must not call this at import for a plugin's key).

    Call the returned :class:`Setting` for its current value (set from code with
    ``tetrarch.configure``, else its ``TETRARCH_*`` environment variable, else its
    default), read at that moment; ``.lookup()`` also says where the value came from,
    ``.env`` names the variable for messages. Cheap: a backend's probe may call it.

    Raises:
        ValueError: (a ``tetrarch.ConfigError``) no setting has that key; the message
            suggests the nearest one and lists them all.
    """
    found = SETTINGS.get(key)
    if found is not None:
        return found
    known = known_settings()
    found = known.get(key)
    if found is None:
        owner = absent_owner(key)
        near = closest(key, list(known))
        why = f" ({owner})" if owner else f" (did you mean {near}?)" if near else ""
        raise ConfigError(f"no tetrarch setting {key!r}{why}; valid: {', '.join(known)}")
    return found


def module_present(module: str) -> bool:
    """Whether ``module`` can be imported, judged without executing it.

    Parent packages of a dotted name are imported (that is how Python finds
    submodules); the module itself is not. Never raises.
    """
    try:
        return importlib.util.find_spec(module) is not None
    except Exception:  # noqa: BLE001 - a broken parent package counts as absent
        return False


def python_library_found(module: str, distribution: str) -> str | None:
    """``"pyzmq 27.3.0"`` when ``module`` is importable, else None. Never raises.

    The version comes from the installed ``distribution``'s metadata, so the library
    is not imported (``tetrarch plugins`` stays fast and loads no native code).
    """
    if not module_present(module):
        return None
    try:
        version = _dists.version(distribution)  # importlib.metadata.version's answer, without importing it
    except Exception:  # noqa: BLE001 - e.g. a system package without dist metadata
        version = "(unknown version)"
    return f"{distribution} {version}"


def library_probe(module: str, distribution: str, extra: str = "") -> Callable[[], ProbeResult]:
    """A probe for a backend built on a Python library: is ``distribution`` installed?

    The probe answers ``yes("pyzmq 27.3.0")`` or ``no("pyzmq is not installed", "pip install
    pyzmq (or pip install "tetrarch[zmq]")")`` (the second command when ``extra`` is given),
    finding ``module`` without importing it. A backend whose code is not written yet
    declares ``BackendSpec(implemented=False)``; the registry then puts that first.
    """

    def probe() -> ProbeResult:
        found = python_library_found(module, distribution)
        if found is not None:
            return ProbeResult.yes(found)
        remedy = f"pip install {distribution}" + (f' (or pip install "tetrarch[{extra}]")' if extra else "")
        return ProbeResult.no(f"{distribution} is not installed", remedy)

    probe.__doc__ = f"Whether {distribution} is installed (found without importing it)."
    return probe


def not_implemented_factory(
    what: str,
    issue_hint: str,
    *,
    alternative: str = "",
    base: type = object,
    name: str | None = None,
) -> type:
    """A placeholder class whose construction raises :class:`NotImplementedError`.

    It lets a plugin point its factory at a real module before the backend exists,
    without pretending to work::

        ZmqTransport = not_implemented_factory(
            "zmq transport", "transports",
            alternative="use the builtin 'ipc' or 'tcp' transport", base=Transport)

    ``ZmqTransport()`` then raises ``NotImplementedError("the zmq transport is not
    implemented yet (tetrarch issue: transports); use the builtin 'ipc' or 'tcp'
    transport")``.
    """
    message = f"the {what} is not implemented yet (tetrarch issue: {issue_hint})"
    if alternative:
        message += f"; {alternative}"

    caller = sys._getframe(1).f_globals.get("__name__", __name__)

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(message)

    def body(ns: dict[str, Any]) -> None:
        ns["__new__"] = __new__
        ns["__doc__"] = f"Placeholder: {message}."
        ns["__module__"] = caller
        ns["not_implemented_message"] = message

    cls_name = name or "".join(part.capitalize() for part in what.split())
    return types.new_class(cls_name, (base,), exec_body=body)


def probe_in_child(module: str, timeout: float = 20.0) -> dict[str, Any]:
    """Run ``python -m module`` in a short-lived child and return the JSON object of its last line.

    For probes that would load a native library into the probing process: listing plugins
    stays light, a broken library cannot take the process down, and a library that
    installs signal handlers when it initializes (libfabric's ``shm`` provider catches
    SIGSEGV and SIGTERM) leaves this process's alone. The child sees this process's
    ``sys.path``. Never raises: a failed child gives ``{"child_error": "..."}``.
    """
    import json
    import os
    import subprocess

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    try:
        done = subprocess.run([sys.executable, "-m", module], capture_output=True, text=True, timeout=timeout,
                              env=env, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"child_error": f"{type(exc).__name__}: {exc}"}
    lines = done.stdout.strip().splitlines()
    try:
        found = json.loads(lines[-1])
        if not isinstance(found, dict):
            raise ValueError(f"not a JSON object: {lines[-1][:100]!r}")
    except (IndexError, ValueError) as exc:
        return {"child_error": f"python -m {module} printed no JSON object ({exc}; exit status {done.returncode}: "
                               f"{done.stderr.strip()[-300:]})"}
    return found
