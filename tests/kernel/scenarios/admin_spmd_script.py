"""A torchrun-style script that stops in breakpoint() (run by admin_spmd.py through tetrarch.spmd)."""

import os

x = int(os.environ.get("RANK", "0")) + 40
breakpoint()  # noqa: T100 - the debugger test pauses here
print("after", x + 1, flush=True)
