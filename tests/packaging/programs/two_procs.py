"""Two procs on the transport TETRARCH_TRANSPORT names: each answers, and each listens on that transport."""
import os

from tetrarch import Actor, endpoint, this_host


class Echo(Actor):
    @endpoint
    def echo(self, x: int) -> int:
        return x + 1


procs = this_host().spawn_procs(per_host={"gpus": 2})
mesh = procs.spawn("echo", Echo)
print("answers", sorted(mesh.echo.call(41).get().values()))
print("schemes", sorted({address.split("://")[0] for address, *_ in mesh._ids}))
procs.stop().get()
print("transport", os.environ["TETRARCH_TRANSPORT"])
