"""Threads: the GIL is released while next waits; Ctrl-C interrupts a
waiting next promptly and leaves the pipeline closable; one Python thread
at a time per pipeline."""
import os
import signal
import threading
import time

import numpy as np
import pytest

import sluice
from conftest import LUA_SLEEP

# Opening runs the map once (the first sample's output gives the stage's
# schema), so the first next returns at once and the second waits.  One
# thread: these tests time one sample at a time (the default, "auto", may
# run a second worker that has sample 2 ready before the pull of sample 1
# is interrupted).
SLOW = LUA_SLEEP + """
local sluice = require "sluice"
return sluice.range(%d):map(function(s) sleep_ms(%d) return s end,
                            {threads = 1})
"""


def test_gil_is_released_while_next_waits():
    p = sluice.open_string(SLOW % (3, 1000))
    next(p)  # sample 1 is under way from here: about 1 s to wait
    count = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.05)
    before = count[0]
    t0 = time.monotonic()
    b = next(p)
    waited = time.monotonic() - t0
    during = count[0] - before
    stop.set()
    t.join()
    assert np.asarray(b["i"]).tolist() == 1
    assert waited >= 0.3
    # A thread holding no lock counts millions in 0.3 s; with the GIL held
    # by the waiting next it would count nothing.
    assert during > 10000, during
    p.close()


def interrupt_after(seconds):
    main = threading.main_thread().ident

    def fire():
        signal.pthread_kill(main, signal.SIGINT)

    t = threading.Timer(seconds, fire)
    t.start()
    return t


def test_ctrl_c_interrupts_next_promptly_and_pipeline_closes():
    p = sluice.open_string(SLOW % (3, 1500))
    next(p)
    t0 = time.monotonic()
    timer = interrupt_after(0.2)
    with pytest.raises(KeyboardInterrupt):
        next(p)
    took = time.monotonic() - t0
    timer.join()
    assert took < 0.2 + 0.5, took  # not the 1.5 s the sample takes
    t1 = time.monotonic()
    p.close()  # waits for the sample under way, then joins everything
    assert p.closed and time.monotonic() - t1 < 5


def test_interrupted_next_keeps_its_batch_for_the_next_call():
    p = sluice.open_string(SLOW % (4, 600))
    it = iter(p)
    got = [int(np.asarray(next(it)["i"]))]
    timer = interrupt_after(0.1)
    with pytest.raises(KeyboardInterrupt):
        next(it)
    timer.join()
    got += [int(np.asarray(b["i"])) for b in it]  # the same pass
    assert got == [0, 1, 2, 3]
    p.close()


def test_ctrl_c_during_iteration_in_a_for_loop():
    p = sluice.open_string(SLOW % (100, 100))
    seen = []
    timer = interrupt_after(0.35)
    with pytest.raises(KeyboardInterrupt):
        for b in p:
            seen.append(int(np.asarray(b["i"])))
    timer.join()
    assert 1 <= len(seen) <= 5
    p.close()


def test_a_second_thread_is_refused_while_one_waits():
    p = sluice.open_string(SLOW % (3, 500))
    next(p)
    errors = []

    def other():
        time.sleep(0.1)
        try:
            next(p)
        except RuntimeError as e:
            errors.append(str(e))

    t = threading.Thread(target=other)
    t.start()
    next(p)
    t.join()
    assert errors and "one thread at a time" in errors[0]
    p.close()


def test_dropping_a_pipeline_mid_next_does_not_hang():
    p = sluice.open_string(SLOW % (3, 400))
    next(p)
    timer = interrupt_after(0.1)
    with pytest.raises(KeyboardInterrupt):
        next(p)
    timer.join()
    t0 = time.monotonic()
    del p  # the puller finishes the sample and closes on its own
    assert time.monotonic() - t0 < 0.3


def test_pipelines_on_several_threads_at_once(t10k):
    from conftest import fmnist_script
    totals = []

    def run():
        with sluice.open_script(fmnist_script(), "test", t10k) as p:
            totals.append(sum(np.asarray(b["label"]).shape[0] for b in p))

    ts = [threading.Thread(target=run) for _ in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert totals == [10000] * 3


def test_a_forked_child_refuses_the_parents_pipeline_and_drops_it():
    import gc
    p = sluice.open_string(SLOW % (4, 100))
    next(p)  # the puller runs
    pid = os.fork()
    if pid == 0:  # the child: none of the pipeline's threads are here
        code = 3
        try:
            try:
                next(p)
                code = 1
            except sluice.ECLOSED as e:
                code = 0 if "another process" in e.detail else 2
            del p  # the finaliser must not join absent threads
            gc.collect()
        finally:
            os._exit(code)
    deadline = time.monotonic() + 20
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError("the forked child hung")
        time.sleep(0.05)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert int(np.asarray(next(p)["i"])) == 1  # the parent's is intact
    p.close()


# Issue 24 item 3: "catch KeyboardInterrupt, save a checkpoint".  The batch
# an interrupted next was pulling is the caller's: state() is the position
# before it, a refused restore() keeps it, reset() and a restore() that
# succeeds leave its pass.
def interrupted(p, it):
    """Pulls sample 0, then interrupts the pull of sample 1 (0.1 s into it:
    the slow samples below take 0.8 s, so a timer thread delayed by a
    loaded machine still fires while the pull waits; at 0.3 s one fired
    after sample 1 had arrived, and the test lost it)."""
    first = int(np.asarray(next(it)["i"]))
    timer = interrupt_after(0.1)
    with pytest.raises(KeyboardInterrupt):
        next(it)
    timer.join()
    return first


def rest(it):
    return [int(np.asarray(b["i"])) for b in it]


def resumed(code, state):
    """The rest of the pass a new pipeline of `code` restored to `state`
    yields."""
    with sluice.open_string(code) as q:
        q.restore(state)
        return rest(iter(q))


def test_state_after_ctrl_c_is_before_the_interrupted_batch():
    code = SLOW % (4, 600)
    p = sluice.open_string(code)
    it = iter(p)
    assert interrupted(p, it) == 0
    state = p.state()  # waits for the pull of sample 1 under way
    assert p.state() == state  # asking again changes nothing
    assert rest(it) == [1, 2, 3]  # the batch was not dropped
    # The checkpoint does not count it as consumed.
    assert resumed(code, state) == [1, 2, 3]
    p.close()


def test_state_after_the_interrupted_batch_is_collected_counts_it():
    code = SLOW % (4, 800)
    p = sluice.open_string(code)
    it = iter(p)
    interrupted(p, it)
    assert int(np.asarray(next(it)["i"])) == 1
    assert resumed(code, p.state()) == [2, 3]
    assert rest(it) == [2, 3]
    p.close()


def test_state_when_the_interrupted_batch_has_arrived():
    code = SLOW % (4, 800)
    p = sluice.open_string(code)
    it = iter(p)
    interrupted(p, it)
    time.sleep(1.2)  # the batch is there, not collected
    assert resumed(code, p.state()) == [1, 2, 3]
    assert rest(it) == [1, 2, 3]
    p.close()


def test_refused_restore_after_ctrl_c_keeps_the_interrupted_batch():
    p = sluice.open_string(SLOW % (4, 800))
    it = iter(p)
    interrupted(p, it)
    with pytest.raises(sluice.Error) as e:
        p.restore(b"not a state")
    assert e.value.code_name in ("SL_ECORRUPT", "SL_EINVAL")
    assert rest(it) == [1, 2, 3]
    p.close()


def test_restore_or_reset_after_ctrl_c_leave_the_interrupted_pass():
    code = SLOW % (4, 800)
    p = sluice.open_string(code)
    at_start = p.state()
    it = iter(p)
    interrupted(p, it)
    p.restore(at_start)
    assert rest(iter(p)) == [0, 1, 2, 3]  # not sample 1 first
    it = iter(p)
    interrupted(p, it)
    p.reset()
    assert rest(iter(p)) == [0, 1, 2, 3]
    p.close()


def test_state_after_ctrl_c_of_a_pipeline_that_cannot_save():
    p = sluice.open_string(LUA_SLEEP + """
        local sluice = require "sluice"
        return sluice.range(4):flat_map(function(s)
          if s.i > 0 then sleep_ms(400) end
          return {s}
        end, {ordered = false})
        """)
    it = iter(p)
    interrupted(p, it)
    with pytest.raises(sluice.EUNSUPPORTED):
        p.state()
    assert rest(it) == [1, 2, 3]
    p.close()


# scan replays its pass on a restore when its state is not a plain value
# (here a table with a metatable; a plain one is saved and restores at
# once): k calls of a slow fn make a restore slow enough to interrupt.
SLOW_SCAN = LUA_SLEEP + """
local sluice = require "sluice"
return sluice.range(6):scan(0, function(acc, s)
  sleep_ms(%d)
  return setmetatable({}, {}), s
end)
"""


def test_next_after_an_interrupted_restore_over_a_held_batch():
    code = SLOW_SCAN % 300
    with sluice.open_string(code) as q:
        for _ in range(3):
            next(q)
        state = q.state()  # before sample 3
    p = sluice.open_string(code)
    it = iter(p)
    interrupted(p, it)  # sample 1 pending
    time.sleep(0.5)  # it arrives: the restore below is posted at once
    timer = interrupt_after(0.1)
    with pytest.raises(KeyboardInterrupt):
        p.restore(state)  # 3 calls of fn to replay: about 0.9 s
    timer.join()
    # The restore finishes and succeeds: the held batch is dropped, and
    # next continues the restored pass - not the restore's result taken
    # for a batch.
    assert [int(np.asarray(next(p)["i"])) for _ in range(3)] == [3, 4, 5]
    with pytest.raises(StopIteration):
        next(p)
    p.close()


# Reading ahead (pipeline.c): after a batch that came quickly the puller
# pulls the next one while Python works.  The read-ahead batch is the
# caller's next one: state() is before it, a restore resumes at it, a reset
# drops it; a slow chain is not read ahead.
FAST = 'return require("sluice").range(40):batch(4)'


def batches_out(p):
    return [s for s in p.stats() if s["name"] == "batch"][0]["samples_out"]


def settled(f, want, seconds=10):
    deadline = time.monotonic() + seconds
    while f() != want and time.monotonic() < deadline:
        time.sleep(0.01)
    return f()


def test_a_fast_chain_is_read_ahead_and_state_is_before_that_batch():
    sluice.stats_enable(True)
    try:
        p = sluice.open_string(FAST)
        it = iter(p)
        assert np.asarray(next(it)["i"]).tolist() == [0, 1, 2, 3]
        # the second batch was pulled without being asked for
        assert settled(lambda: batches_out(p), 2) == 2
        state = p.state()
        with sluice.open_string(FAST) as q:
            q.restore(state)
            assert np.asarray(next(iter(q))["i"]).tolist() == [4, 5, 6, 7]
        # the read-ahead batch is the caller's next one
        assert np.asarray(next(it)["i"]).tolist() == [4, 5, 6, 7]
        rest = [np.asarray(b["i"]).tolist()[0] for b in it]
        assert rest == list(range(8, 40, 4))
        # a reset drops a read-ahead batch: the pass starts at 0
        it = iter(p)
        next(it)
        settled(lambda: batches_out(p), 2)
        p.reset()
        assert np.asarray(next(iter(p))["i"]).tolist() == [0, 1, 2, 3]
        # so does a restore that succeeds
        p.restore(state)
        assert np.asarray(next(iter(p))["i"]).tolist() == [4, 5, 6, 7]
        p.close()
    finally:
        sluice.stats_enable(False)


def test_a_slow_chain_is_not_read_ahead():
    sluice.stats_enable(True)
    try:
        p = sluice.open_string(SLOW % (6, 150))
        it = iter(p)
        next(it)  # at once (the opening made it); sample 1 is read ahead
        next(it)  # sample 1: 150 ms, too slow to read past
        time.sleep(0.5)
        st = [s for s in p.stats() if s["name"] == "map"][0]
        assert st["samples_out"] == 2, st
        t0 = time.monotonic()
        p.close()  # nothing under way to wait for
        assert time.monotonic() - t0 < 0.12
    finally:
        sluice.stats_enable(False)
