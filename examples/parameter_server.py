"""A parameter server over RDMA: workers read the weights and write their gradients one-sided.

The server actor publishes its weights and one gradient slot per worker as ``RDMABuffer``s
(registered, not copied). Each step every worker ``read_into``s the current weights,
computes the gradient of a least-squares loss on its own data, and ``write_from``s it into
its slot; the server then averages the slots and takes a step. The loss goes down.

    python examples/parameter_server.py
"""

from __future__ import annotations

import numpy as np

from tetrarch import Actor, current_rank, endpoint, this_host
from tetrarch.rdma import RDMABuffer

DIM, WORKERS, STEPS, LR = 64, 2, 20, 0.2
TRUE_W = np.linspace(-1.0, 1.0, DIM)


class Server(Actor):
    def __init__(self) -> None:
        self.weights = np.zeros(DIM)
        self.grads = np.zeros((WORKERS, DIM))

    @endpoint
    def handles(self) -> tuple[RDMABuffer, list[RDMABuffer]]:
        return RDMABuffer(self.weights), [RDMABuffer(self.grads[i]) for i in range(WORKERS)]

    @endpoint
    def apply(self) -> None:
        self.weights -= LR * self.grads.mean(axis=0)  # in place: the registered memory stays the same

    @endpoint
    def loss(self) -> float:
        return float(np.mean((self.weights - TRUE_W) ** 2))


class Worker(Actor):
    def __init__(self) -> None:
        rng = np.random.default_rng(current_rank().rank)
        self.x = rng.normal(size=(256, DIM))
        self.y = self.x @ TRUE_W
        self.w = np.zeros(DIM)

    @endpoint
    def step(self, weights: RDMABuffer, grads: list[RDMABuffer]) -> None:
        weights.read_into(self.w).get()
        grad = self.x.T @ (self.x @ self.w - self.y) / len(self.y)
        grads[current_rank().rank].write_from(grad).get()


def main() -> None:
    server_procs = this_host().spawn_procs(per_host={"gpus": 1})
    worker_procs = this_host().spawn_procs(per_host={"gpus": WORKERS})
    server = server_procs.spawn("server", Server)
    workers = worker_procs.spawn("workers", Worker)
    weights, grads = server.handles.call_one().get()
    first = server.loss.call_one().get()
    for step in range(STEPS):
        workers.step.call(weights, grads).get()
        server.apply.call_one().get()
        if step % 5 == 4:
            print(f"step {step + 1:2d}: loss {server.loss.call_one().get():.5f}")
    last = server.loss.call_one().get()
    print(f"parameter_server: loss went from {first:.4f} to {last:.4f} over {STEPS} steps "
          f"({WORKERS} workers, {weights.backend} backend)")
    worker_procs.stop().get()
    server_procs.stop().get()


if __name__ == "__main__":
    main()
