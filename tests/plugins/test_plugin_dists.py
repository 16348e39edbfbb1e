"""``_plugins._dists`` answers what ``importlib.metadata`` answers: entry points and versions.

Each case lays out distributions on a ``sys.path`` of its own and compares the two, the
exception included where ``importlib.metadata`` raises (``_dists`` hands such layouts over
to it).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tetrarch._plugins import _dists
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))

GROUP = "tetrarch"


def _dist(root: Path, folder: str, metadata: str | None, entry_points: str | None,
          metadata_file: str = "METADATA") -> Path:
    info = root / folder
    info.mkdir(parents=True)
    if metadata is not None:
        (info / metadata_file).write_text(metadata)
    if entry_points is not None:
        (info / "entry_points.txt").write_text(entry_points)
    return info


def _listed(find: Any, group: str) -> Any:
    try:
        return [(e.name, e.value, e.group, e.dist.name, e.dist.version) for e in find(group)]
    except Exception as exc:  # noqa: BLE001 - compared
        return type(exc)


def _same_everywhere(monkeypatch: pytest.MonkeyPatch, path: list[str]) -> None:
    monkeypatch.setattr(sys, "path", path)
    importlib.invalidate_caches()  # importlib.metadata keeps a folder's listing while its mtime holds
    for group in (GROUP, "console_scripts"):
        expected = _listed(lambda g: importlib.metadata.entry_points(group=g), group)
        assert _listed(_dists.entry_points, group) == expected, group


def test_this_environment() -> None:
    for group in (GROUP, "console_scripts", "pytest11"):
        assert _listed(_dists.entry_points, group) == _listed(
            lambda g: importlib.metadata.entry_points(group=g), group)
    for name in ("pyzmq", "pluggy", "tetrarch", "Tetrarch_Transport.ZMQ", "pytest"):
        assert _dists.version(name) == importlib.metadata.version(name)
    with pytest.raises(LookupError):
        _dists.version("no-such-distribution-here")


def test_layouts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    meta = "Metadata-Version: 2.1\nName: {}\nVersion: {}\nSummary: x\n\nbody\nName: not-this\n"
    _dist(first, "Pigeon_Transport-1.0.dist-info", meta.format("Pigeon.Transport", "1.0"),
          "# comment\n[console_scripts]\npigeon = pigeon.cli:main\n\n[tetrarch]\n  pigeon =  pigeon._plugin \n"
          "other=pigeon.other:Plugin.attr [extra]\n")
    _dist(second, "pigeon_transport-2.0.dist-info", meta.format("pigeon-transport", "2.0"),
          "[tetrarch]\nshadowed = pigeon2\n")  # the same name later on sys.path: never seen
    _dist(first, "crow-3.0.dist-info", "Name: crow\r\nVersion:\t3.0  \r\n\r\n", "[tetrarch]\ncrow = crow\n")
    _dist(first, "raven-1.dist-info", "", "[tetrarch]\nraven = raven\n")  # empty METADATA: PKG-INFO
    (first / "raven-1.dist-info" / "PKG-INFO").write_text("Name: Raven\nVersion: 1\n")
    _dist(first, "nameless-1.dist-info", "Summary: none\n", "[tetrarch]\nnameless = nameless\n")
    _dist(first, "plain.egg-info", "Name: plain\nVersion: 0.1\n", "[tetrarch]\nplain = plain\n",
          metadata_file="PKG-INFO")
    (first / "old-0.1.egg-info").write_text("Name: old\nVersion: 0.1\n")  # an egg-info file
    _dist(second, "finch-1.0.dist-info", meta.format("finch", "1.0"), None)
    for path in ([str(first), str(second)], [str(second), str(first)], [str(tmp_path / "absent"), str(first)]):
        _same_everywhere(monkeypatch, path)
        for name in ("pigeon-transport", "crow", "raven", "finch", "old", "plain", "absent"):
            try:
                expected: Any = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                expected = LookupError
            try:
                got: Any = _dists.version(name)
            except LookupError:
                got = LookupError
            assert got == expected, (path, name)


@pytest.mark.parametrize("metadata", [
    "Name: folded\n  continued\nVersion: 1\n",  # a folded header
    "Name: twice\nName: again\nVersion: 1\n",
    "Metadata-Version: 2.1\nnot a header\nName: late\nVersion: 1\n",  # email starts the body there
    "From someone\nName: envelope\nVersion: 1\n",
    " Name: first-line-folded\nVersion: 1\n",
])
def test_metadata_email_reads_otherwise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, metadata: str) -> None:
    _dist(tmp_path, "odd-1.dist-info", metadata, "[tetrarch]\nodd = odd\n")
    _same_everywhere(monkeypatch, [str(tmp_path)])


def test_layouts_left_to_importlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _dist(tmp_path / "bad", "broken-1.dist-info", "Name: broken\nVersion: 1\n", "[tetrarch]\nno equals sign\n")
    _same_everywhere(monkeypatch, [str(tmp_path / "bad")])  # importlib.metadata raises: so do we
    _dist(tmp_path / "case", "Loud-1.DIST-INFO", "Name: loud\nVersion: 1\n", "[tetrarch]\nloud = loud\n")
    _same_everywhere(monkeypatch, [str(tmp_path / "case")])
    _dist(tmp_path / "latin", "latin-1.dist-info", None, "[tetrarch]\nlatin = latin\n")
    (tmp_path / "latin" / "latin-1.dist-info" / "METADATA").write_bytes(b"Name: l\xe9\nVersion: 1\n")
    _same_everywhere(monkeypatch, [str(tmp_path / "latin")])
    archive = tmp_path / "plugins.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("zipped-1.0.dist-info/METADATA", "Name: zipped\nVersion: 1.0\n")
        zf.writestr("zipped-1.0.dist-info/entry_points.txt", "[tetrarch]\nzipped = zipped\n")
    _same_everywhere(monkeypatch, [str(archive)])
    assert [e.name for e in _dists.entry_points(GROUP)] == ["zipped"]


def test_entry_point_loads_like_importlib() -> None:
    ep = _dists.EntryPoint("x", "os.path:join", GROUP, None)
    assert ep.load() is importlib.metadata.EntryPoint("x", "os.path:join", GROUP).load()
    assert _dists.EntryPoint("x", "os.path", GROUP, None).load() is sys.modules["os.path"]
