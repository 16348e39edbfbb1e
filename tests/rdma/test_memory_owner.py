"""A registration lives exactly as long as its memory: anchored on the memory's owner, not on the view.

``RDMABuffer(t.view(torch.uint8).flatten())`` is Monarch's idiom; the caller keeps ``t`` and
drops the view at once. The registration must survive that (it did not: a dtype view has
``_base is None`` in torch 2.13, so the view was taken for the owner), and still end when the
memory is freed, whichever of ``t`` and its views goes last. Checked below the frontend:
``as_memory`` gives the owner, ``_lifetime`` the weak reference and the finalizer that
release the registration (the RdmaSuite does the same through real procs and backends).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import pytest

from tetrarch._rdma._memory import as_memory
from tetrarch._rdma._service import _lifetime

torch = pytest.importorskip("torch")


def _anchor(data: Any) -> tuple[Callable[[], object | None], list[str]]:
    """Register-like: the registration's ``alive`` and a list that gets "released" when it is released."""
    released: list[str] = []
    memory = as_memory(data, "RDMABuffer(data)", writable=True)
    alive, finalizer = _lifetime(memory.root, lambda: released.append("released"))
    assert finalizer is not None, f"{type(memory.root).__name__} takes no weak reference"
    del memory
    return alive, released


def _views_of_a_float_tensor() -> dict[str, Callable[[Any], Any]]:
    return {
        "t.view(torch.uint8).flatten()": lambda t: t.view(torch.uint8).flatten(),
        "t.view(-1).view(torch.uint8)": lambda t: t.view(-1).view(torch.uint8),
        "t[16:].view(torch.uint8)": lambda t: t[16:].view(torch.uint8),
    }


@pytest.mark.parametrize("idiom", list(_views_of_a_float_tensor()))
def test_a_dtype_view_dropped_at_once_leaves_the_registration_alive_while_the_tensor_lives(idiom: str) -> None:
    t = torch.arange(256, dtype=torch.float32)
    alive, released = _anchor(_views_of_a_float_tensor()[idiom](t))  # the view is gone when this returns
    gc.collect()
    assert released == [] and alive() is not None, f"{idiom}: released while the tensor still owns the memory"
    del t
    gc.collect()
    assert released == ["released"] and alive() is None, f"{idiom}: the memory was freed but stays registered"


def test_the_registration_ends_with_the_last_view_when_the_tensor_goes_first() -> None:
    t = torch.ones(64)
    view = t.view(torch.uint8)
    alive, released = _anchor(view)
    del t
    gc.collect()
    assert released == [] and alive() is not None, "the view still holds the memory"
    del view
    gc.collect()
    assert released == ["released"] and alive() is None


def test_every_view_of_one_tensor_shares_one_owner() -> None:
    t = torch.zeros(32)
    owners = [as_memory(v, "x", writable=True).root for v in (t, t.view(torch.uint8), t.view(torch.int32),
                                                              t.view(-1), t[4:8].view(torch.uint8))]
    assert all(owner is owners[0] for owner in owners), [type(owner).__name__ for owner in owners]


def test_a_numpy_view_of_a_kept_array_or_tensor_lives_as_long_as_their_memory() -> None:
    np = pytest.importorskip("numpy")
    a = np.ones(256, dtype=np.float32)
    alive, released = _anchor(a.reshape(-1).view(np.uint8))
    gc.collect()
    assert released == [] and alive() is not None
    del a
    gc.collect()
    assert released == ["released"]

    t = torch.ones(256)
    alive, released = _anchor(t.view(torch.uint8).numpy())  # base: a temporary torch view
    gc.collect()
    assert released == [] and alive() is not None, "a numpy array over a dropped torch view: the tensor owns it"
    del t
    gc.collect()
    assert released == ["released"]
