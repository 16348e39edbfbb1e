"""A traced program over three processes: the client calls an actor of one proc, which calls an
actor of another proc from its handler (a nested call). Prints DONE at the end.

Arguments: the number of nested calls (default 3); ``wide``: then one call to a mesh of three
leaves, which goes through the host's relay when ``TETRARCH_RELAY_MIN`` is at most 3 (it says
``RELAYED`` then); ``--configure=FILE``: the program sets ``trace_file`` itself.
"""

import sys

import tetrarch
from tetrarch import Actor, endpoint, this_host


class Leaf(Actor):
    @endpoint
    def square(self, x: int) -> int:
        return x * x

    @endpoint
    def fail(self) -> None:
        raise ValueError("on purpose")


class Middle(Actor):
    def __init__(self, leaf: "Leaf") -> None:
        self.leaf = leaf

    @endpoint
    def relay(self, x: int) -> int:
        return self.leaf.square.call_one(x).get()


calls = int(sys.argv[1]) if len(sys.argv) > 1 else 3
for arg in sys.argv[2:]:
    if arg.startswith("--configure="):
        tetrarch.configure(trace_file=arg.split("=", 1)[1])
host = this_host()
upper = host.spawn_procs(per_host={"gpus": 1}, name="upper")
lower = host.spawn_procs(per_host={"gpus": 1}, name="lower")
leaf = lower.spawn("leaf", Leaf)
middle = upper.spawn("middle", Middle, leaf)
for i in range(calls):
    assert middle.relay.call_one(i).get() == i * i
if "wide" in sys.argv[2:]:
    wide = host.spawn_procs(per_host={"gpus": 3}, name="wide").spawn("wide", Leaf)
    if wide._relay_plan(wide._shape, 3) is not None:
        print("RELAYED", flush=True)
    assert list(wide.square.call(3).get().values()) == [9, 9, 9]
print("DONE", flush=True)
