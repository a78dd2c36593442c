"""Samples run side by side: results in the items' order, items drawn lazily, errors where read."""

import threading

import pytest

from deploykit.graph import parallel


def test_results_come_back_in_the_items_order_whatever_finishes_first():
    first_done = threading.Event()

    def work(i):
        if i % 2 == 0:  # every even item waits until the odd one beside it has finished
            assert first_done.wait(30)
            first_done.clear()
        else:
            first_done.set()
        return i * i

    assert list(parallel.in_order(work, range(8), runs=2)) == [i * i for i in range(8)]


def test_two_runs_are_really_side_by_side():
    both = threading.Barrier(2, timeout=30)  # broken (an error) unless two items run at once
    assert list(parallel.in_order(lambda i: both.wait() is not None and i, range(4), runs=2)) == [0, 1, 2, 3]


def test_items_are_drawn_at_most_runs_ahead_of_the_result_read():
    drawn = []

    def items():
        for i in range(10):
            drawn.append(i)
            yield i

    results = parallel.in_order(lambda i: i, items(), runs=2)
    assert next(results) == 0 and len(drawn) == 2
    assert next(results) == 1 and len(drawn) == 3


def test_an_error_in_the_work_is_raised_where_its_result_is_read():
    def work(i):
        if i == 3:
            raise ValueError("item 3")
        return i

    got = []
    with pytest.raises(ValueError, match="item 3"):
        for r in parallel.in_order(work, range(6), runs=2):
            got.append(r)
    assert got == [0, 1, 2]


def test_one_run_at_a_time_works_on_the_callers_thread():
    threads = list(parallel.in_order(lambda i: threading.current_thread(), range(3), runs=1))
    assert threads == [threading.main_thread()] * 3


def test_the_cores_are_shared_between_the_runs(monkeypatch):
    monkeypatch.setattr(parallel, "cores", lambda: 16)
    assert parallel.runs_at_once() == 2 and parallel.threads_per_run() == 8
    monkeypatch.setattr(parallel, "cores", lambda: 1)
    assert parallel.runs_at_once() == 1 and parallel.threads_per_run() == 1


def test_results_too_large_for_memory_run_one_at_a_time(monkeypatch):
    monkeypatch.setattr(parallel, "cores", lambda: 2)
    monkeypatch.setattr(parallel, "_memory", lambda: 24 * 2**30)
    assert parallel.runs_within_memory(1 * 2**30) == 2  # 3 GiB alive of 24
    assert parallel.runs_within_memory(3 * 2**30) == 1  # 9 GiB would be more than a quarter
    assert parallel.threads_per_run(1) == 2 and parallel.threads_per_run(2) == 1


def test_work_in_the_background_runs_on_its_own_thread_and_gives_its_result_or_its_error():
    started, release = threading.Event(), threading.Event()

    def work():
        started.set()
        assert release.wait(30)  # still running while the caller goes on
        return threading.current_thread().name

    ahead = parallel.in_background(work)
    assert started.wait(30)
    release.set()
    assert ahead.result() == "deploykit-ahead" and ahead.result() == "deploykit-ahead"
    assert not ahead._thread.is_alive()  # joined: nothing is left running

    def fails():
        raise ValueError("in the background")

    with pytest.raises(ValueError, match="in the background"):
        parallel.in_background(fails).result()
