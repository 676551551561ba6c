"""The progress bar fed by `jax.debug.callback`: one bar, never past its total, also when the
callbacks of several population members arrive on several threads at once (as they do when
the population is sharded over devices)."""

from __future__ import annotations

import sys
import threading

import tqdm.auto

from rlax_trpo.experiment.progress import ProgressBar


def test_concurrent_callbacks_make_one_bar_that_stops_at_its_total(monkeypatch):
    made, counted = [], []

    class Counted(tqdm.auto.tqdm):
        def __init__(self, *args, **kwargs):
            made.append(self)
            super().__init__(*args, **kwargs)

        def update(self, n=1):  # widen the window between the check and the count
            counted.append(n)
            threading.Event().wait(1e-4)
            return super().update(n)

    monkeypatch.setattr(tqdm.auto, "tqdm", Counted)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # let the threads interleave often
    total, members = 200, 8
    bar = ProgressBar(total, 16, enabled=False, population=members)
    start = threading.Barrier(members)

    def member() -> None:
        start.wait()
        for i in range(total):
            bar(i, float(i))

    try:
        threads = [threading.Thread(target=member) for _ in range(members)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(switch)
    bar.close()
    assert len(made) == 1, f"{len(made)} bars"
    assert sum(counted) == total and bar.done == total


def test_the_bar_counts_each_iteration_once_in_order():
    bar = ProgressBar(5, 10, enabled=False, population=2)
    for i in range(5):
        for _ in range(2):
            bar(i, 1.0)
    assert bar.done == 5
    bar.close()
