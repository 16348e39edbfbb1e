"""A work queue served through explicit response ports.

One ``WorkQueue`` actor hands out items to a mesh of ``Worker`` actors. A worker asks
for work with a plain ``queue.get.call_one()``; when the queue is empty, the queue
keeps the caller's reply *port* and answers later, when an item is ``put`` (the
Monarch "crawler" pattern). Workers report each result through a ``Channel`` port
that the client reads.

Run with ``python examples/work_queue.py`` (inside the venv).
"""

from __future__ import annotations

from collections import deque

from tetrarch import Actor, Channel, Port, current_rank, endpoint, this_host

DONE = None  # the item that tells a worker to stop


class WorkQueue(Actor):
    """Items waiting for workers, and workers (their reply ports) waiting for items."""

    def __init__(self) -> None:
        self.items: deque[object] = deque()
        self.waiting: deque[Port[object]] = deque()

    @endpoint(explicit_response_port=True)
    def get(self, port: Port[object]) -> None:
        if self.items:
            port.send(self.items.popleft())
        else:
            self.waiting.append(port)  # answered by a later put()

    @endpoint
    def put(self, item: object) -> None:
        if self.waiting:
            self.waiting.popleft().send(item)
        else:
            self.items.append(item)

    @endpoint
    def waiting_workers(self) -> int:
        return len(self.waiting)


class Worker(Actor):
    @endpoint
    def run(self, queue: WorkQueue, results: Port[tuple[int, int, int]]) -> int:
        """Take items until ``DONE``; send ``(rank, item, item**2)`` for each; return the count."""
        me = current_rank().rank
        done = 0
        while True:
            item = queue.get.call_one().get()  # blocks this actor's thread until an item comes
            if item is DONE:
                return done
            results.send((me, item, item * item))
            done += 1


def main() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 4})
    queue_proc = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        queue = queue_proc.spawn("queue", WorkQueue)
        workers = procs.spawn("workers", Worker)
        results, receiver = Channel.open()

        running = workers.run.call(queue, results)  # every worker now waits on the empty queue
        n_items = 20
        for item in range(n_items):
            queue.put.broadcast(item)
        for _ in range(len(workers)):
            queue.put.broadcast(DONE)

        seen = sorted(receiver.recv().get(timeout=30) for _ in range(n_items))
        counts = running.get(timeout=30)
        assert [item for _, item, _ in sorted(seen, key=lambda r: r[1])] == list(range(n_items))
        assert all(square == item * item for _, item, square in seen)
        assert sum(counts.values()) == n_items
        print("items per worker:", dict(zip(range(len(workers)), counts.values(), strict=True)))
        print("queue idle, workers waiting:", queue.waiting_workers.call_one().get(timeout=30))
        print(f"work_queue: processed {n_items} items with {len(workers)} workers")
    finally:
        procs.stop().get(timeout=30)
        queue_proc.stop().get(timeout=30)


if __name__ == "__main__":
    main()
