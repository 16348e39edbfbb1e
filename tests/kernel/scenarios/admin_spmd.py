"""Runs admin_spmd_script.py on one rank through SPMDActor.main; prints the result."""

from pathlib import Path

from tetrarch import this_host
from tetrarch.spmd import SPMDActor

pm = this_host().spawn_procs(per_host={"gpus": 1})
am = pm.spawn("spmd", SPMDActor)
addr, port = am.slice(gpus=0).get_host_port.call_one(None).get(timeout=60)
script = str(Path(__file__).with_name("admin_spmd_script.py"))
print("RESULT", list(am.main.call(addr, port, [script]).get(timeout=120).values()), flush=True)
pm.stop().get()
