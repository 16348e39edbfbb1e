"""The generated tables of ``docs/configuration.md``: every setting, launch variable and Monarch name.

Core's settings come first; then a section per first-party plugin that declares settings
(``tetrarch_settings``), generated from the installed plugin's own declaration, so that one page
lists every setting ``configure()`` may take; then the test suite's settings. Third-party
plugins' settings are theirs to document (``tetrarch config`` lists them).

    python -m tetrarch._config_doc --update docs/configuration.md   # rewrite them in place
    python -m tetrarch._config_doc --markdown                       # print them
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._config import LAUNCH_VARS, SETTINGS, TEST_SETTINGS, Setting, display
from ._config_monarch import MONARCH_ALIASES, MONARCH_REFUSED
from ._config_plugins import FIRST_PARTY_SETTINGS, settings_by_owner
from ._errors import ConfigError

__all__ = ["markdown_tables", "update_markdown"]

_BEGIN = "<!-- BEGIN generated tables: python -m tetrarch._config_doc --update docs/configuration.md -->"
_END = "<!-- END generated tables -->"


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _monarch_names(key: str) -> str:
    return ", ".join(f"`{a.name}`" for a in MONARCH_ALIASES.values() if a.key == key) or "-"


def _monarch_tables() -> list[str]:
    """The section on Monarch's names: those tetrarch takes, then those it refuses and why."""
    lines = ["### Monarch names", "",
             ("`configure`, `configured` and `source` take these names of Monarch's `configure(...)` "
             "(`monarch.config`) for the setting beside them; `get_global_config()` shows the value under "
             "both names, in each one's form:"), "",
             _md_row(["Monarch name", "sets", "Monarch's value, and how it differs"]), _md_row(["---"] * 3)]
    lines += [_md_row([f"`{a.name}`", f"`{a.key}`", a.note]) for a in MONARCH_ALIASES.values()]
    lines += ["", ("Monarch's other names raise `ValueError` with the reason below; a misspelt name raises "
              "`TypeError` suggesting the nearest known one:"), "",
              _md_row(["Monarch name", "why tetrarch has no such setting, and what to do instead"]),
              _md_row(["---"] * 2)]
    lines += [_md_row([f"`{name}`", why]) for name, why in sorted(MONARCH_REFUSED.items())]
    return lines


def _settings_table(settings: Sequence[Setting[Any]]) -> list[str]:
    lines = [_md_row(["key", "environment variable", "type", "default", "reaches procs", "Monarch names",
                      "meaning"]), _md_row(["---"] * 7)]
    for s in settings:
        lines.append(_md_row([f"`{s.key}`", f"`{s.env}`", s.expected, f"`{display(s, s.default)}`",
                              "yes" if s.propagate else "no", _monarch_names(s.key), s.doc]))
    return lines


def _plugin_tables() -> list[str]:
    """A section per first-party plugin with settings, from its installed declaration.

    Raises:
        ValueError: such a plugin is not installed (its declaration is the source of its table).
    """
    declared = {d.replace("_", "-").lower(): settings for d, settings in settings_by_owner().items()}
    lines: list[str] = []
    for dist in dict.fromkeys(d for d, _ in FIRST_PARTY_SETTINGS.values()):
        if dist not in declared:
            raise ConfigError(f"{dist} declares its settings' table: install it (pip install -e plugins/...) "
                              "to generate the tables")
        lines += ["", f"### Settings of the `{dist}` plugin", "",
                  (f"Declared by the plugin (`tetrarch_settings`); while `{dist}` is not installed, "
                   "`configure()` refuses them as unknown and says which plugin declares them."), "",
                  *_settings_table(declared[dist])]
    return lines


def markdown_tables() -> str:
    """The settings, launch variables and Monarch names tables of ``docs/configuration.md``, with their markers.

    Raises:
        ValueError: a first-party plugin with settings is not installed.
    """
    lines = [_BEGIN, "", *_settings_table(list(SETTINGS.values())), *_plugin_tables(), "",
             "### Settings of tetrarch's own test suite", "",
             "Set like the others, and listed apart: they tune tetrarch's tests, not a program.", "",
             *_settings_table(list(TEST_SETTINGS.values()))]
    lines += ["", "Internal variables the kernel sets for the processes it starts (not settings):", "",
              _md_row(["variable", "meaning"]), _md_row(["---"] * 2)]
    lines += [_md_row([f"`{v.name}`", v.doc]) for v in LAUNCH_VARS.values()]
    return "\n".join([*lines, "", *_monarch_tables(), "", _END])


def update_markdown(text: str) -> str:
    """``text`` (a markdown document) with its generated tables replaced by :func:`markdown_tables`.

    Raises:
        ValueError: ``text`` lacks the begin or end marker.
    """
    begin, end = text.find(_BEGIN), text.find(_END)
    if begin < 0 or end < begin:
        raise ConfigError(f"no generated tables: the document needs the lines {_BEGIN!r} and {_END!r}")
    return text[:begin] + markdown_tables() + text[end + len(_END):]


def _main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tetrarch._config_doc", description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--markdown", action="store_true", help="print the generated tables")
    what.add_argument("--update", metavar="FILE", help="rewrite the generated tables of FILE in place")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown_tables())
        return 0
    with open(args.update, encoding="utf-8") as f:
        text = f.read()
    with open(args.update, "w", encoding="utf-8") as f:
        f.write(update_markdown(text))
    return 0


if __name__ == "__main__":
    from tetrarch._config_doc import _main as main  # the real module, not this __main__ copy

    raise SystemExit(main())
