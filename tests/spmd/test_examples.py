"""The SPMD examples run as scripts (fresh interpreters) and print what they promise."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from spmd_helpers import NO_TORCH

from tetrarch.testing import scaled

pytest.importorskip("torch", reason=NO_TORCH)

pytestmark = pytest.mark.timeout(scaled(120))

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.isolated
def test_ddp_weights_equal_one_process_training_and_rank_0s_loss_goes_down(run_scenario) -> None:
    res = run_scenario(EXAMPLES / "ddp.py", timeout=90, cwd=EXAMPLES.parent)
    assert res.returncode == 0, f"ddp.py exited {res.returncode}\n{res.stdout}\n{res.stderr}"
    assert "weights equal one-process training: True" in res.stdout, res.stdout
    first, last = map(float, re.search(r"rank 0 loss ([\d.]+) -> ([\d.]+)", res.stdout).groups())  # type: ignore[union-attr]
    assert last < first / 2, res.stdout


@pytest.mark.isolated
@pytest.mark.timeout(scaled(180))  # two meshes of 4 procs, each importing torch
def test_spmd_script_runs_an_unmodified_torchrun_script_twice(run_scenario) -> None:
    res = run_scenario(EXAMPLES / "spmd_script.py", timeout=150, cwd=EXAMPLES.parent)
    assert res.returncode == 0, f"spmd_script.py exited {res.returncode}\n{res.stdout}\n{res.stderr}"
    assert "spmd_script: 4 ranks ran train_ddp_script.py twice through SPMDActor.main" in res.stdout, res.stdout
    assert "spmd_script: 4 ranks ran train_ddp_script.py twice through serve().run_spmd()" in res.stdout, res.stdout
    # rank 0's prints reach the client prefixed with its rank, once per run (2 by SPMDActor, 2 served)
    assert res.stdout.count("trained on 4 ranks with gloo") == 4, res.stdout
