"""``pyverbs.device.get_device_list()`` run in a child interpreter, for the probe.

Listing plugins must not load pyverbs' native code into the listing process (``tetrarch
plugins`` stays light, and a broken rdma-core cannot take it down), so the probe asks a
short-lived child: ``python -m tetrarch_rdma_verbs._devlist`` prints one JSON line.
"""

from __future__ import annotations

import json
from typing import Any

from tetrarch.plugins import probe_in_child

__all__ = ["list_devices"]

_TIMEOUT = 20.0


def _name(device: object) -> str:
    name = getattr(device, "name", device)
    return name.decode(errors="replace") if isinstance(name, bytes) else str(name)


def _main() -> None:
    from tetrarch_rdma_verbs._import import import_pyverbs

    out: dict[str, Any] = {}
    try:
        pyverbs = import_pyverbs()
        out["version"] = str(getattr(pyverbs, "__version__", ""))
        from pyverbs.device import get_device_list
    except Exception as exc:  # noqa: BLE001 - reported by the probe
        out["import_error"] = f"{type(exc).__name__}: {exc}"
        print(json.dumps(out))
        return
    try:
        out["devices"] = [_name(d) for d in get_device_list()]
    except Exception as exc:  # noqa: BLE001 - PyverbsRDMAError('Failed to get devices list')
        out["list_error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out))


def list_devices() -> dict[str, Any]:
    """``{"version", "devices"}``, or ``{"import_error"}`` / ``{"list_error"}`` / ``{"child_error"}``. Never raises."""
    return probe_in_child("tetrarch_rdma_verbs._devlist", _TIMEOUT)


if __name__ == "__main__":
    _main()
