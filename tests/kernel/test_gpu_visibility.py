"""Which GPU each proc of a ``gpus`` dimension sees (``CUDA_VISIBLE_DEVICES``), given the host's own value."""

from __future__ import annotations

import pytest

from tetrarch._runtime.programs._host_agent import proc_visible_devices

pytestmark = pytest.mark.transport_independent  # pure logic


def test_without_a_host_value_proc_i_gets_gpu_i() -> None:
    assert [proc_visible_devices(i, None) for i in range(4)] == ["0", "1", "2", "3"]


def test_a_host_list_is_handed_out_in_order_and_never_exceeded() -> None:
    # A proc past the list sees no GPU, never one the user left out (here 0 and 1).
    assert [proc_visible_devices(i, "2, 3") for i in range(3)] == ["2", "3", ""]


def test_an_empty_host_value_hides_every_gpu() -> None:
    # CUDA_VISIBLE_DEVICES= in the client's environment: run on CPU (docs/spmd.md, GPUs).
    assert [proc_visible_devices(i, "") for i in range(2)] == ["", ""]
