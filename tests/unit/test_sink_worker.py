"""The sink worker: calls in a thread, one at a time, in order; the loop stays free meanwhile;
nothing it defers runs while a call is in the thread; a cancelled caller waits for its call."""

from __future__ import annotations

import threading

import trio

from replica.core.sink_worker import SinkWorker


def test_calls_run_in_a_thread_one_at_a_time_in_order_while_the_loop_runs() -> None:
    worker = SinkWorker()
    release = threading.Event()
    order: list[str] = []
    inside = 0
    most_inside = 0
    lock = threading.Lock()

    def call(name: str) -> str:
        nonlocal inside, most_inside
        with lock:
            inside += 1
            most_inside = max(most_inside, inside)
        assert threading.current_thread() is not threading.main_thread()
        if name == "first":
            assert release.wait(5)
        order.append(name)
        with lock:
            inside -= 1
        return name.upper()

    results: list[str] = []
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.sleep(0.001)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker)

            async def run(name: str) -> None:
                results.append(await worker.run(call, name))

            nursery.start_soon(run, "first")
            await trio.sleep(0.01)
            nursery.start_soon(run, "second")
            await trio.sleep(0.01)
            assert worker.busy
            seen = ticks
            await trio.sleep(0.05)
            assert ticks > seen  # the loop runs while the first call is blocked
            release.set()
            await worker.idle()
            assert not worker.busy
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert order == ["first", "second"] and results == ["FIRST", "SECOND"]
    assert most_inside == 1 and worker.calls == 2


def test_call_soon_waits_for_the_call_in_the_thread() -> None:
    worker = SinkWorker()
    release = threading.Event()
    events: list[str] = []

    def slow() -> None:
        assert release.wait(5)
        events.append("slow done")

    async def main() -> None:
        worker.call_soon(events.append, "at once")  # idle: runs now
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker.run, slow)
            await trio.sleep(0.01)
            worker.call_soon(events.append, "deferred")
            assert events == ["at once"]
            release.set()
        assert events == ["at once", "slow done", "deferred"]

    trio.run(main)


def test_a_cancelled_caller_waits_for_its_call_and_after_sees_every_call() -> None:
    returned: list[str] = []
    worker = SinkWorker(after=lambda: returned.append("after"))
    release = threading.Event()

    def slow() -> str:
        assert release.wait(5)
        returned.append("slow")
        return "done"

    async def main() -> None:
        timer = threading.Timer(0.1, release.set)
        timer.start()
        with trio.move_on_after(0.01) as scope:
            assert await worker.run(slow) == "done"
        # The deadline passed while the call ran, and the caller came back only once the call
        # was released: it waited for the call, not the deadline.
        assert scope.cancel_called
        assert release.is_set()
        assert returned == ["slow", "after"]
        assert not worker.busy
        timer.join()

    trio.run(main)
