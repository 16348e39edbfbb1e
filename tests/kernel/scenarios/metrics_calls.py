"""Seven calls to rank 0 of a two-actor mesh, with TETRARCH_METRICS=1: its metrics go to OTLP."""

from admin_actors import Watched
from tetrarch import this_host

procs = this_host().spawn_procs(per_host={"gpus": 2}, name="measured")
mesh = procs.spawn("measured", Watched)
mesh.initialized.get()
for _ in range(7):
    mesh.slice(gpus=0).rank.call_one().get()
procs.stop().get()
print("DONE", flush=True)
