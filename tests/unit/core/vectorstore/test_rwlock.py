"""The readers-writer lock: readers share it, a writer has it alone, and a waiting writer
holds back new readers."""

from __future__ import annotations

import threading

from core.vectorstore.rwlock import RWLock
from tests.support.waiting import wait_until

# A ceiling that only bounds a hang.
TIMEOUT_S = 30.0


def test_readers_share_the_lock() -> None:
    lock = RWLock()
    inside = threading.Barrier(2, timeout=TIMEOUT_S)

    def read() -> None:
        with lock.read():
            inside.wait()  # both readers are in at once, or this times out

    others = threading.Thread(target=read)
    others.start()
    read()
    others.join(TIMEOUT_S)
    assert not others.is_alive()


def test_a_writer_waits_for_the_readers_and_holds_back_new_ones() -> None:
    lock = RWLock()
    order: list[str] = []
    reading = threading.Event()
    finish_reading = threading.Event()

    def first_reader() -> None:
        with lock.read():
            reading.set()
            finish_reading.wait(TIMEOUT_S)
            order.append("read 1 done")

    def writer() -> None:
        with lock.write():
            order.append("write")

    def late_reader() -> None:
        with lock.read():
            order.append("read 2")

    threads = [threading.Thread(target=first_reader)]
    threads[0].start()
    reading.wait(TIMEOUT_S)
    threads.append(threading.Thread(target=writer))
    threads[1].start()
    # The writer is waiting once the lock counts it: a reader now queues behind it.
    wait_until(lambda: lock._writers_waiting, TIMEOUT_S, "the writer waits for the lock")
    threads.append(threading.Thread(target=late_reader))
    threads[2].start()
    finish_reading.set()
    for thread in threads:
        thread.join(TIMEOUT_S)
    assert order == ["read 1 done", "write", "read 2"]
