"""A program run with TETRARCH_ADMIN=1: serves the admin API without a line of code for it.

Prints READY once its mesh is up, then waits for a line on stdin before it ends.
"""

import sys

from admin_actors import Watched
from tetrarch import this_host

procs = this_host().spawn_procs(per_host={"gpus": 2})
mesh = procs.spawn("from_env", Watched)
mesh.initialized.get()
print("READY", flush=True)
sys.stdin.readline()
procs.stop().get()
