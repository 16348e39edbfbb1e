"""The ``slurm`` allocator passes the allocator contract on the local cluster (netns layout: h1, h2).

The cluster is this folder's session fixture (conftest.py, ``scripts/local-slurm``); it needs root.
Nothing may stay in the cluster's queue after a test: the suite is its only user.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import pytest

from tetrarch.testing.allocator import AllocatorConformance

#: The layout the contract runs on: nodes with hostnames and addresses of their own.
LAYOUT = "netns"


class TestSlurmAllocator(AllocatorConformance):
    #: The env of the cluster's tools (SLURM_CONF), set by the ``client_env`` fixture.
    slurm_env: ClassVar[dict[str, str]] = {}

    @pytest.fixture(scope="class")
    @classmethod
    def allocator(cls) -> str:
        return "slurm"

    @pytest.fixture(scope="class")
    @classmethod
    def client_env(cls, slurm_clusters: Any) -> Mapping[str, str]:
        if shutil.which("sbatch") is None and os.environ.get("LOCAL_SLURM_NO_INSTALL") == "1":
            pytest.skip("Slurm is not installed and LOCAL_SLURM_NO_INSTALL=1")
        cls.slurm_env = dict(slurm_clusters.get(LAYOUT).env)
        return {**cls.slurm_env, "TETRARCH_TRANSPORT": "tcp"}  # ipc cannot span hosts

    @pytest.fixture(scope="class")
    @classmethod
    def allocator_options(cls) -> Mapping[str, object]:
        return {"time_limit": "5", "job_start_timeout": 60, "job_name": "tetrarch-conformance"}

    @pytest.fixture(scope="class")
    @classmethod
    def bad_options(cls) -> Sequence[tuple[Mapping[str, object], str]]:
        return [
            ({"not_an_option_of_any_allocator": 1},
             r"unknown Slurm option\(s\) \['not_an_option_of_any_allocator'\]; known: \[.*'partition'"),
            ({"gpus_per_node": 0}, r"gpus_per_node must be a positive int, got 0"),
            ({"slurm_args": "--exclusive"}, r"slurm_args must be a list of strings such as \['--exclusive'\]"),
            ({"partition": "no-such-partition"}, r"invalid partition specified: no-such-partition"),
        ]

    def left_behind(self, seen: Sequence[Mapping[str, str]], timeout: float) -> list[str]:
        """Jobs still in the cluster's queue (its only user is this suite), after up to ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            res = subprocess.run(["squeue", "-h", "-o", "%i %T %j"], env={**os.environ, **self.slurm_env},
                                 capture_output=True, text=True, timeout=10, check=False)
            jobs = res.stdout.splitlines() if res.returncode == 0 else [f"squeue failed: {res.stderr.strip()}"]
            if not jobs or time.monotonic() >= deadline:
                return [f"Slurm job {job}" for job in jobs]
            threading.Event().wait(0.2)  # polling Slurm's queue: it offers nothing to wait on
