"""The plugin API version: what a plugin was written for, and whether this tetrarch can load it.

:data:`PLUGIN_API_VERSION` is ``"MAJOR.MINOR"``, the version of everything under
:mod:`tetrarch.plugins` (its names and their contracts, the hooks and their records,
the ``tetrarch.testing`` kits). It changes with the API, not with tetrarch's release:

* **MINOR** grows when the API grows and every plugin keeps working: a new name, a new
  optional hook, a record field or an interface method with a default.
* **MAJOR** grows (and MINOR restarts at 0) when a plugin written for the old API could
  break: a name removed or renamed, a hook's or a record's required arguments changed,
  a new abstract method, a contract a conforming backend no longer meets.

A plugin states the version it was written for as the attribute ``tetrarch_plugin_api``
of its entry point module, a literal (``tetrarch_plugin_api = "1.0"``; never assign
``PLUGIN_API_VERSION`` itself: that would always match). It loads when its MAJOR equals
this tetrarch's and its MINOR is not newer (it may use names that came with its MINOR);
otherwise it is ``incompatible``: listed by ``tetrarch plugins`` with both versions and
the fix, its hooks never called.

The name is lowercase with the hooks' prefix, as pytest's ``pytest_plugins`` variable: a
module-level setting of the plugin, neither a hook (pluggy ignores what is no function) nor
an environment variable (``TETRARCH_*`` names are those).

The attribute is read before the plugin is registered, not asked through a hook: a
plugin for another MAJOR may implement hooks whose signatures this tetrarch no longer
has, and registering it would fail as "broken" instead of saying what is wrong.

A plugin that declares nothing was written before plugins declared versions, against
the API that became ``1.0``: it is taken as ``1.0`` (:data:`UNDECLARED`), so it keeps
loading under every 1.x and is refused, as incompatible, by the first 2.0. Refusing it
outright would break every such plugin for no change of API; taking it as the current
version would load it under APIs it has never seen. ``tetrarch plugins`` adds a note
to its rows, and ``TETRARCH_PLUGINS_STRICT=1`` (a plugin's CI) refuses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = ["API_ATTRIBUTE", "PLUGIN_API_VERSION", "UNDECLARED", "ApiCheck", "check_api", "undeclared_note"]

#: The version of the plugin API this tetrarch provides (see the module docstring for the rules).
PLUGIN_API_VERSION: Final = "1.2"
#: The attribute of a plugin's entry point module that names the API version it was written for.
API_ATTRIBUTE: Final = "tetrarch_plugin_api"
#: The version a plugin that declares none is taken to be written for.
UNDECLARED: Final = "1.0"

_VERSION_RE = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")


def _parse(text: str) -> tuple[int, int]:
    match = _VERSION_RE.fullmatch(text)
    if match is None:
        raise ValueError(text)
    return int(match[1]), int(match[2])


@dataclass(frozen=True, slots=True)
class ApiCheck:
    """What a plugin declared and what follows: ``ok``, or the ``reason`` and ``remedy`` of its refusal.

    ``declared`` is the attribute's value, or ``""`` when the plugin has none (then
    ``version`` is :data:`UNDECLARED`); ``malformed`` means the value is no
    ``"MAJOR.MINOR"`` string (the plugin is broken, not incompatible).
    """

    declared: str
    version: str
    ok: bool
    reason: str = ""
    remedy: str = ""
    malformed: bool = False


def check_api(plugin: object, distribution: str, core: str = PLUGIN_API_VERSION) -> ApiCheck:
    """Whether ``plugin`` (an entry point module, or any object) can be loaded by an API ``core``.

    Never raises: a malformed declaration comes back with ``malformed`` set.
    """
    raw = getattr(plugin, API_ATTRIBUTE, None)
    if raw is None:
        declared, version = "", UNDECLARED
    elif isinstance(raw, str) and _VERSION_RE.fullmatch(raw):
        declared = version = raw
    else:
        return ApiCheck(repr(raw), "", False,
                        f"{API_ATTRIBUTE} = {raw!r} is no plugin API version (a 'MAJOR.MINOR' string such as "
                        f"{PLUGIN_API_VERSION!r})",
                        f"a bug in {distribution}; report it", malformed=True)
    (major, minor), (cmajor, cminor) = _parse(version), _parse(core)
    if major == cmajor and minor <= cminor:
        return ApiCheck(declared, version, True)
    written = f"plugin API {version}" + ("" if declared else f" (it declares no {API_ATTRIBUTE}: taken as {version})")
    reason = f"written for {written}; this tetrarch provides plugin API {core}"
    loadable = core if cminor == 0 else f"{cmajor}.0 to {core}"  # what this tetrarch loads
    if (major, minor) > (cmajor, cminor):
        remedy = (f"upgrade tetrarch to a release with plugin API {version} or a later {major}.x, or install a "
                  f"release of {distribution} written for plugin API {loadable}")
    else:
        remedy = f"upgrade {distribution} to a release written for plugin API {loadable}"
    remedy += f", or disable it (TETRARCH_DISABLE_PLUGINS={distribution})"
    return ApiCheck(declared, version, False, reason, remedy)


def undeclared_note(target: str) -> str:
    """The note ``tetrarch plugins`` adds to the rows of a plugin that declares no version."""
    where = target or "its entry point module"
    return (f"the plugin declares no {API_ATTRIBUTE}, so it is taken as written for plugin API {UNDECLARED}; "
            f"its author should add {API_ATTRIBUTE} = \"{PLUGIN_API_VERSION}\" (or the version it was written for) "
            f"to {where}")
