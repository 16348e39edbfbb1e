"""An endpoint that calls breakpoint(): paused for `tetrarch debug` when the admin API is served
(TETRARCH_ADMIN=1), skipped with a warning otherwise. Prints the call's result."""

from admin_actors import Stepper
from tetrarch import this_host

procs = this_host().spawn_procs(per_host={"gpus": 2})
mesh = procs.spawn("stepper", Stepper)
mesh.initialized.get()
print("CALLING", flush=True)
other = mesh.slice(gpus=0).step.call_one(1)  # rank 0 pauses too when a debugger may attach
print(f"RESULT {mesh.slice(gpus=1).step.call_one(5).get()}", flush=True)
print(f"OTHER {other.get()}", flush=True)
procs.stop().get()
