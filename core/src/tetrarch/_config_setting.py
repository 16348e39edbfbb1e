"""The :class:`Setting` record: one setting's name, variable, type, default, and how its value is read.

Its current value comes from a value set from code (held in :data:`CODE`, which
:mod:`tetrarch._config` replaces under its lock), its ``TETRARCH_*`` environment
variable, or its default. The settings themselves are declared in :mod:`tetrarch._config`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from ._config_monarch import DURATION_WORDS, parse_duration
from ._errors import ArgumentTypeError, ConfigError

__all__ = ["CODE", "UNSET", "CodeValues", "Setting", "Source"]

T = TypeVar("T")


class CodeValues:
    """The values set from code: ``values`` (key -> value) is replaced whole, never changed in place."""

    __slots__ = ("values",)

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}


#: The values set from code (``tetrarch.configure``): read without a lock, replaced under ``_config``'s.
CODE = CodeValues()

#: Where a setting's current value came from.
Source = Literal["code", "environment", "default"]

_FALSE = frozenset({"0", "false", "no", "off"})
_TRUE = frozenset({"1", "true", "yes", "on"})
#: A key with no value set from code.
UNSET: Any = object()
_UNSET = UNSET

# ------------------------------------------------------------------ value types
# A setting's ``type`` is one of these; ``tuple`` holds a list of names (``a,b``).


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(text)


def _parse_names(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split(",") if t.strip())


_PARSERS: Mapping[type, Any] = {float: float, int: int, bool: _parse_bool, str: str, tuple: _parse_names}
_ACCEPTED: Mapping[type, tuple[type, ...]] = {float: (int, float), int: (int,), bool: (bool,), str: (str,)}
_TYPE_WORDS: Mapping[type, str] = {
    float: "a number", int: "an integer", bool: "a boolean (1/0, true/false, yes/no, on/off)",
    str: "a name", tuple: "comma-separated names",
}


@dataclass(frozen=True, slots=True)
class Setting(Generic[T]):
    """One user setting: its name in code and in the environment, type, default and meaning.

    Call it for the current value: set from code > environment variable > default. An
    environment variable that is empty or blank counts as unset.

    Raises:
        ValueError: (on construction) an inconsistent declaration: ``env`` is not
            ``TETRARCH_<KEY>``, an unsupported ``type``, or a default of another type.
    """

    key: str  #: python identifier, the keyword of :func:`configure`
    env: str  #: the environment variable, ``TETRARCH_<KEY>``
    type: type  #: float, int, bool, str, or tuple (a list of names)
    default: T  #: value when neither code nor the environment set one (``None``: chosen automatically)
    doc: str  #: one line of meaning
    propagate: bool = True  #: whether :func:`config_env` passes it to procs spawned afterwards
    unit: str = ""  #: e.g. ``"seconds"``; part of the expected-type wording in errors
    #: A backend's probe reads it: setting it from code makes the plugin registry probe
    #: again (:func:`probe_generation`).
    probed: bool = False

    def __post_init__(self) -> None:
        if not self.key.isidentifier() or self.env != f"TETRARCH_{self.key.upper()}":
            raise ConfigError(f"setting {self.key!r}: its variable must be TETRARCH_{self.key.upper()}, not {self.env}")
        if self.type not in _PARSERS:
            raise ConfigError(f"setting {self.key!r}: unsupported type {self.type!r}")
        if self.default is not None and type(self.default) is not self.type:
            raise ConfigError(f"setting {self.key!r}: default {self.default!r} is not a {self.type.__name__}")

    @property
    def expected(self) -> str:
        """What a valid value is, in words (``"a number of seconds"``)."""
        words = _TYPE_WORDS[self.type]
        return f"{words} of {self.unit}" if self.unit else words

    def __call__(self) -> T:
        """The current value.

        Raises:
            ValueError: the environment variable holds no valid value (names the
                variable, its value and the expected type).
        """
        return self.lookup()[0]

    def source(self) -> Source:
        """Where the current value comes from: ``"code"``, ``"environment"`` or ``"default"``."""
        if self.key in CODE.values:
            return "code"
        return "default" if self._env_text() is None else "environment"

    def lookup(self) -> tuple[T, Source]:
        """The current value and where it came from, read together.

        Raises:
            ValueError: as :meth:`__call__`.
        """
        value = CODE.values.get(self.key, _UNSET)
        if value is not _UNSET:
            return value, "code"
        raw = self._env_text()
        if raw is None:
            return self.default, "default"
        return self.parse(raw), "environment"

    def _env_text(self) -> str | None:
        raw = os.environ.get(self.env)
        return raw if raw is not None and raw.strip() else None

    def value_in(self, env: Mapping[str, str]) -> T:
        """The value for a process started with the environment ``env``: its variable there
        when that holds a valid value, else this process's value (an invalid one is left for
        that process to report)."""
        raw = env.get(self.env, "")
        if raw.strip():
            try:
                return self.parse(raw)
            except ValueError:
                pass
        return self()

    def parse(self, raw: str, *, origin: str | None = None) -> T:
        """The value that the text ``raw`` (as in the environment) stands for.

        A setting in seconds also reads a duration as Monarch writes it (``"30s"``, ``"1m 30s"``).

        Raises:
            ValueError: ``raw`` is not a valid value; the message names ``origin``
                (default: ``environment variable <ENV>='<raw>'``) and the expected type.
        """
        try:
            value: T = _PARSERS[self.type](raw.strip())
        except ValueError:
            if self.unit == "seconds":
                try:
                    return parse_duration(raw)  # type: ignore[return-value]
                except ValueError:
                    pass
            where = origin or f"environment variable {self.env}={raw!r}"
            also = f" (or {DURATION_WORDS})" if self.unit == "seconds" else ""
            raise ConfigError(f"{where} must be {self.expected}{also}") from None
        return value

    def coerce(self, value: object) -> T:
        """Validate a value given by code: one of the setting's type, or text read as :meth:`parse` does.

        An int is accepted for a float setting; a list, tuple or set of strings, or one
        comma-separated string, for a list of names.

        Raises:
            TypeError: a value of another type.
            ValueError: text that is no valid value, or empty text.
        """
        what = f"configure({self.key}={value!r})"
        if isinstance(value, str):
            if not value.strip():
                raise ConfigError(f"{what}: an empty value; pass None to drop the value set from code")
            return self.parse(value, origin=what)
        if self.type is tuple:
            if isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(v, str) for v in value):
                return self.parse(",".join(sorted(value) if isinstance(value, (set, frozenset)) else value))
        elif isinstance(value, _ACCEPTED[self.type]) and (self.type is bool or not isinstance(value, bool)):
            return self.type(value)
        raise ArgumentTypeError(f"{what}: expected {self.expected}, got {type(value).__name__}")

    def render(self, value: T) -> str:
        """``value`` as the text of the environment variable (what :meth:`parse` reads back)."""
        if isinstance(value, bool):
            return "1" if value else "0"
        if isinstance(value, tuple):
            return ",".join(value)
        if isinstance(value, float):
            return repr(value)
        return "" if value is None else str(value)


