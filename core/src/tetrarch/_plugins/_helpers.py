"""Small helpers shared by plugins, so no two plugin distributions repeat code.

Everything here is cheap: finding a library never imports it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
import types
from collections.abc import Callable
from typing import Any

from ._specs import ProbeResult

__all__ = [
    "module_present",
    "not_implemented_factory",
    "not_implemented_yet",
    "pending_library_probe",
    "python_library_found",
]


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
        version = importlib.metadata.version(distribution)
    except Exception:  # noqa: BLE001 - e.g. a system package without dist metadata
        version = "(unknown version)"
    return f"{distribution} {version}"


def not_implemented_yet(found: str, what: str, alternative: str = "") -> ProbeResult:
    """The probe answer of a backend whose library is present but whose code is not.

    ``not_implemented_yet("pyzmq 27.3.0", "zmq transport", "use 'tcp'")`` reads
    "pyzmq 27.3.0 found; the zmq transport is not implemented yet".
    """
    return ProbeResult.no(f"{found} found; the {what} is not implemented yet", alternative)


def pending_library_probe(module: str, distribution: str, extra: str, what: str,
                          alternative: str = "") -> Callable[[], ProbeResult]:
    """A probe for a backend built on a Python library whose tetrarch code is not written yet.

    Unavailable either way, but it says which: the library is missing (with the install
    hint for ``tetrarch[extra]``) or present and the backend is not implemented yet.
    """

    def probe() -> ProbeResult:
        found = python_library_found(module, distribution)
        if found is None:
            return ProbeResult.no(f"{distribution} is not installed",
                                  f'pip install {distribution} (or pip install "tetrarch[{extra}]")')
        return not_implemented_yet(found, what, alternative)

    probe.__doc__ = f"Whether {distribution} is installed (found without importing it), then the honest state."
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
