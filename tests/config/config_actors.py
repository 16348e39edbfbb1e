"""The actor the end-to-end settings test spawns (an importable module, as users' code would be)."""

from __future__ import annotations

import os

from tetrarch import Actor, endpoint
from tetrarch._config import get_global_config, known_settings


class SettingProbe(Actor):
    @endpoint
    def read(self, key: str) -> tuple[object, str, str | None]:
        """The setting's value in this proc, its source, and its environment variable's text."""
        setting = known_settings()[key]  # a plugin's too: this proc loads its own plugins
        return setting(), setting.source(), os.environ.get(setting.env)

    @endpoint
    def read_monarch(self, name: str) -> object:
        """The value this proc shows under Monarch's name ``name``."""
        return get_global_config()[name]
