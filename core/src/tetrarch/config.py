"""Settings from code, with the names of Monarch's ``monarch.config``.

::

    from tetrarch.config import configure, configured, get_global_config

    configure(stop_timeout=30)                      # tetrarch's key
    configure(mesh_orphan_timeout="90s")            # Monarch's name: sets orphan_timeout to 90.0
    with configured(enable_log_forwarding=False) as config:
        assert config["forward_output"] is False and config["enable_log_forwarding"] is False
    assert get_global_config()["mesh_orphan_timeout"] == "1m 30s"

Every setting, its ``TETRARCH_*`` variable and the Monarch names it answers to are in
docs/configuration.md; a Monarch name tetrarch has no setting for raises ``ValueError``
saying what to do instead.
"""

from __future__ import annotations

from ._config import clear_runtime_config, configure, configured, get_global_config, get_runtime_config, source

__all__ = ["clear_runtime_config", "configure", "configured", "get_global_config", "get_runtime_config", "source"]
