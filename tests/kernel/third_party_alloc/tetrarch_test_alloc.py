"""Entry point module of a third-party allocator plugin, as a user would install one (tests only).

Featherweight, like every plugin's entry point module: the allocator itself lives in
``tetrarch_test_alloc_impl`` and is imported only when the backend is used. The test
writes a ``tetrarch-test-alloc`` dist-info naming this module under the ``tetrarch``
entry point group, so the registry finds it as an installed distribution.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from tetrarch.plugins import BackendKind, BackendSpec, hookimpl

#: The environment variable that makes this plugin's policy hook choose an allocator.
POLICY_ENV = "TEST_ALLOC_POLICY"


@hookimpl
def tetrarch_allocators() -> Sequence[BackendSpec]:
    return [
        BackendSpec(
            BackendKind.ALLOCATOR, "tagged", "tetrarch_test_alloc_impl:TaggedAllocator",
            priority=0, summary="host agents on this machine, tagged in their environment",
            capabilities=frozenset({"same-host"}),
        )
    ]


@hookimpl
def tetrarch_select_backend(
    kind: BackendKind, candidates: Sequence[BackendSpec], request: Mapping[str, object]
) -> BackendSpec | None:
    """A policy: choose the allocator ``$TEST_ALLOC_POLICY`` names, if it is a candidate."""
    wanted = os.environ.get(POLICY_ENV)
    if kind != BackendKind.ALLOCATOR or not wanted:
        return None
    return next((c for c in candidates if c.name == wanted), None)
