"""Installed distributions' entry points and versions, read without :mod:`importlib.metadata`.

Every process that takes part in a mesh loads the plugin registry, which needs the
``tetrarch`` entry points of the installed distributions. ``importlib.metadata`` finds them,
but importing it (``email``, ``zipfile``, ``pathlib``, ``csv``...) and parsing every
distribution's metadata with the ``email`` package cost a host agent about a fifth of its
start. This module reads the same files the same way, for the common layout: directories on
``sys.path`` holding ``*.dist-info`` / ``*.egg-info`` folders, found by
``importlib.machinery.PathFinder`` alone. It answers exactly what ``importlib.metadata``
would (same distributions, same order, the first of a name on ``sys.path`` winning) and
hands over to ``importlib.metadata`` wherever the layout is not that one: a zip file or an
``.egg`` on ``sys.path``, another finder that finds distributions, metadata it cannot read
the simple way (``tests/plugins/test_plugin_dists.py`` holds it to ``importlib.metadata``).
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import sys
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["EntryPoint", "entry_points", "version"]

_INFO_EXTS = (".dist-info", ".egg-info")
_ENTRY_RE = re.compile(r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$")  # importlib's
_HEADER_RE = re.compile(r"([\041-\071\073-\176]+):[ \t]*(.*)")
_LINE_END_RE = re.compile(r"\r\n|\r|\n")  # email's line ends
_SEPARATORS_RE = re.compile(r"[-_.]+")


class _Fallback(Exception):
    """This layout is one for :mod:`importlib.metadata` to read."""


def _normalize(name: str) -> str:
    """PEP 503 normalisation, dashes as underscores (``importlib.metadata.Prepared.normalize``)."""
    return _SEPARATORS_RE.sub("-", name).lower().replace("-", "_")


class _Dist:
    """One ``*.dist-info`` / ``*.egg-info`` folder: its name and version, read on first use."""

    __slots__ = ("_headers", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self._headers: dict[str, str | None] | None = None

    def read_text(self, filename: str) -> str | None:
        """The file's text; None where ``importlib.metadata`` finds none ("": the folder itself, an old egg-info file).

        Raises:
            _Fallback: the file is no UTF-8 text (``importlib.metadata`` raises then: let it say so).
        """
        try:
            with open(os.path.join(self.path, filename) if filename else self.path, encoding="utf-8") as f:
                return f.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
            return None
        except ValueError:
            raise _Fallback from None

    def _header(self, key: str) -> str | None:
        if self._headers is None:
            text = self.read_text("METADATA") or self.read_text("PKG-INFO") or self.read_text("") or ""
            self._headers = _name_and_version(text)
        return self._headers[key]

    @property
    def name(self) -> str | None:
        return self._header("name")

    @property
    def version(self) -> str | None:
        return self._header("version")


def _name_and_version(text: str) -> dict[str, str | None]:
    """The ``Name`` and ``Version`` headers of a metadata file, as ``email`` would read them."""
    found: dict[str, str | None] = {"name": None, "version": None}
    last = ""  # the header the previous line started
    for line in _header_lines(text):
        if line[0] in " \t":  # a continuation of the previous header
            if last in found:
                raise _Fallback  # folded Name or Version: email's rules, not ours
            continue
        match = _HEADER_RE.fullmatch(line)
        if match is None or line.startswith("From "):
            raise _Fallback  # a line email takes for the body or a defect
        last = match.group(1).lower()
        if last in found and found[last] is None:
            found[last] = match.group(2)
        elif last in found:
            last = ""  # a second Name: email reads the first one only
    return found


def _header_lines(text: str) -> Iterator[str]:
    """The lines of ``text`` up to its first empty one (the body, often long, is not read)."""
    start = 0
    for end in _LINE_END_RE.finditer(text):
        line = text[start:end.start()]
        if not line:
            return
        yield line
        start = end.end()
    if start < len(text):
        yield text[start:]


class EntryPoint:
    """An entry point: what this module and :class:`importlib.metadata.EntryPoint` both offer the loader."""

    __slots__ = ("dist", "group", "name", "value")

    def __init__(self, name: str, value: str, group: str, dist: Any) -> None:
        self.name, self.value, self.group, self.dist = name, value, group, dist

    def load(self) -> Any:
        """The object it names (its module when it names no attribute), as ``importlib.metadata`` loads it."""
        match = _ENTRY_RE.match(self.value)
        if match is None:
            raise AttributeError(f"entry point {self.name!r}: cannot parse {self.value!r}")
        module = importlib.import_module(match.group("module"))
        attrs = filter(None, (match.group("attr") or "").split("."))
        return functools.reduce(getattr, attrs, module)

    def __repr__(self) -> str:
        return f"EntryPoint(name={self.name!r}, value={self.value!r}, group={self.group!r})"


def _plain_layout() -> None:
    """Raise :class:`_Fallback` unless ``importlib.machinery.PathFinder`` is the only finder of distributions."""
    from importlib.machinery import PathFinder

    for finder in sys.meta_path:
        if getattr(finder, "find_distributions", None) is not None and finder is not PathFinder:
            raise _Fallback


def _infos(root: str) -> list[str]:
    """The metadata folders directly in ``root``, in listing order (``[]``: no such directory)."""
    try:
        children = os.listdir(root or ".")
    except OSError:
        if os.path.exists(root or "."):
            raise _Fallback from None  # a zip file (or something importlib.metadata tries harder on)
        return []
    if os.path.basename(root).lower().endswith(".egg"):
        raise _Fallback
    found = []
    for child in children:
        low = child.lower()
        if low.endswith(_INFO_EXTS):
            if not child.endswith(_INFO_EXTS):
                raise _Fallback  # ``Foo.DIST-INFO``: importlib.metadata names it from its metadata
            found.append(child)
    return found


def _stem_name(child: str) -> str:
    name = child.rpartition(".")[0].partition("-")[0]
    if not name:
        raise _Fallback  # ``-1.0.dist-info``: importlib.metadata names it from its metadata
    return _normalize(name)


def _distributions() -> Iterable[_Dist]:
    """Every distribution ``importlib.metadata.distributions()`` finds, the first of each name only."""
    _plain_layout()
    seen: set[str] = set()
    for root in list(sys.path):
        grouped: dict[str, list[str]] = {}  # importlib.metadata lists a folder's infos by name, first seen first
        for child in _infos(root):
            grouped.setdefault(_stem_name(child), []).append(child)
        for name, children in grouped.items():
            for child in children:
                if name not in seen:
                    seen.add(name)
                    yield _Dist(os.path.join(root, child))


def _parse_entry_points(text: str, dist: _Dist, group: str) -> list[EntryPoint]:
    """``group``'s entries of an ``entry_points.txt`` (``importlib.metadata.Sectioned``'s reading)."""
    found = []
    section = None
    for line in map(str.strip, text.splitlines()):
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]")
            continue
        if section is None:
            continue
        if "=" not in line:
            raise _Fallback  # importlib.metadata raises its own error for this
        if section == group:
            name, value = (part.strip() for part in line.split("=", 1))
            found.append(EntryPoint(name, value, group, dist))
    return found


def entry_points(group: str) -> list[Any]:
    """The entry points of ``group`` of every installed distribution, as
    ``importlib.metadata.entry_points(group=group)`` lists them."""
    try:
        found: list[Any] = []
        for dist in _distributions():
            text = dist.read_text("entry_points.txt")
            if text:
                found.extend(_parse_entry_points(text, dist, group))
        for ep in found:
            ep.dist._header("name")  # read (or refused) now, within the fallback's reach
        return found
    except _Fallback:
        import importlib.metadata

        return list(importlib.metadata.entry_points(group=group))


def version(distribution: str) -> str | None:
    """The installed version of ``distribution``, as ``importlib.metadata.version`` reads it.

    Raises:
        LookupError: no such distribution is installed (``PackageNotFoundError`` is one).
        ValueError: ``distribution`` is empty.
    """
    if not distribution:
        raise ValueError("A distribution name is required.")
    wanted = _normalize(distribution)
    try:
        _plain_layout()
        for root in list(sys.path):
            for child in _infos(root):
                if _stem_name(child) == wanted:
                    return _Dist(os.path.join(root, child)).version
    except _Fallback:
        import importlib.metadata

        return importlib.metadata.version(distribution)
    raise LookupError(f"No package metadata was found for {distribution}")
