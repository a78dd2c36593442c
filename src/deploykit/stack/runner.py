"""Run the stack's models together on one device, each at its rate, and each alone first.

CPU: one thread per model, each with its own ONNX Runtime session (the entry's ``threads`` are its
intra-op thread budget; ONNX Runtime releases the GIL while it computes). GPU (``device: cuda``): the
same threads, each driving a TensorRT session on its own CUDA stream at the entry's priority (written
for the GPU; no test runs it here).

A model with a rate is fed a frame every 1/rate seconds. Its latency is completion minus the frame's
arrival (its release), so waiting behind the model's previous frame counts; frames that arrive while
the model is busy are dropped except the newest (a camera keeps the latest image), and every dropped
frame is a miss. A model that ``consumes`` another runs once per finished frame of it (the newest one
waiting, the rest dropped); its own latency starts when the producer finished, and the chain's
end-to-end latency when the frame arrived at the chain's head. Consumers get their own random inputs:
the chain orders and times the runs, it does not pass tensors.

Every timing reads :data:`deploykit.metrics.latency.CLOCK_NS`; waiting is ``time.sleep`` in short
steps (a stand-in clock would never move while a thread sleeps, so stack tests use stand-in sessions
with margins no load can cross, and :mod:`deploykit.stack.pacing`'s arithmetic is tested alone).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from deploykit import tracing
from deploykit.errors import ConfigError, ModelError, TimeLimitExceeded
from deploykit.metrics import latency
from deploykit.stack.pacing import Frames, next_frame, released
from deploykit.stack.soak import OutputCheck, Watch
from deploykit.stack.spec import StackSpec

MAX_ERRORS = 100  # a model whose every call fails stops after this many; the errors fail its check


@dataclass
class _Slot:
    """The newest frame waiting for a consumer: (chain head arrival, producer done), or None."""

    item: tuple[float, float] | None = None
    stopped: bool = False
    cond: threading.Condition = field(default_factory=threading.Condition)


def best_cases(spec: StackSpec, runs: dict[str, Callable[[], Any]]) -> dict[str, float]:
    """Each model's fastest of ``spec.warmup`` untimed runs alone (ms); a deadline below it fails here, exit 2."""
    best = {}
    for name, run in runs.items():
        times, failure = [], None
        for _ in range(max(1, spec.warmup)):
            t0 = latency.CLOCK_NS()
            try:
                run()
            except TimeLimitExceeded:
                raise
            except Exception as e:  # one failed run is the timed phases' to count; all of them is a broken model
                failure = e
                continue
            times.append((latency.CLOCK_NS() - t0) / 1e6)
        if not times:
            raise ModelError(
                f"models.{name}: every one of {max(1, spec.warmup)} warm-up runs raised: "
                f"{type(failure).__name__}: {str(failure).splitlines()[0][:200] if str(failure) else ''}",
                hint="run the model alone (`deploykit gate`) to see why",
            )
        best[name] = min(times)
    for name, m in spec.models.items():
        if m.deadline_ms is not None and m.deadline_ms < best[name]:
            raise ConfigError(
                f"models.{name}.deadline_ms: {m.deadline_ms:g} ms is below the model's measured best "
                f"case ({best[name]:.3f} ms, the fastest of {max(1, spec.warmup)} runs alone): it can "
                "never be met",
                hint="raise the deadline, or use a faster build (precision, threads)",
            )
        if m.e2e_deadline_ms is not None:
            floor = sum(best[n] for n in spec.chain(name))
            if m.e2e_deadline_ms < floor:
                raise ConfigError(
                    f"models.{name}.e2e_deadline_ms: {m.e2e_deadline_ms:g} ms is below the chain's "
                    f"best case ({floor:.3f} ms: {' + '.join(spec.chain(name))} alone)",
                    hint="raise the deadline, or use faster builds",
                )
    return best


def run_phase(
    spec: StackSpec, runs: dict[str, Callable[[], Any]], seconds: float, watch: Watch | None = None
) -> dict[str, Frames]:
    """Run the models of ``runs`` together for ``seconds``; each model's frames.

    A consumer whose producer is not in ``runs`` (a model timed alone) is fed at its chain head's rate.
    ``watch``, when given, samples memory every ``check_every_s`` (this thread) and has each model's
    thread look at its run's outputs for NaN/Inf (:mod:`deploykit.stack.soak`).
    """
    frames = {name: Frames(released(0.0, seconds, 1.0 / _head_rate(spec, name)) + 1) for name in runs}
    slots = {name: _Slot() for name in runs if spec.models[name].consumes in runs}
    consumers: dict[str, list[str]] = {}
    for name in slots:
        consumers.setdefault(spec.models[name].consumes, []).append(name)  # type: ignore[arg-type]
    start = latency.now_s() + 0.05  # every thread is waiting before the first release
    end = start + seconds
    for f in frames.values():
        f.t0 = start

    def done(name: str, head: float, finished: float) -> None:
        for c in consumers.get(name, ()):
            _offer(slots[c], frames[c], (head, finished))

    threads = []
    for name, run in runs.items():
        look = watch.outputs.get(name) if watch is not None else None
        hand_off = done if name in consumers else None  # a model nothing consumes hands nothing on
        if name in slots:
            target, args = _consume, (name, run, slots[name], frames[name], hand_off, look)
        else:
            target, args = _periodic, (name, run, _head_rate(spec, name), start, end, frames[name], hand_off, look)
        threads.append(threading.Thread(target=target, args=args, name=f"stack {name}", daemon=True))
    for t in threads:
        t.start()
    if watch is not None:
        watch.sample(latency.now_s() - start)
    for name, t in zip(runs, threads, strict=True):
        while name not in slots and t.is_alive():
            t.join(watch.limits.check_every_s if watch is not None else 1.0)
            if watch is not None:
                watch.sample(latency.now_s() - start)
    for slot in slots.values():  # producers are done: consumers finish what waits, then stop
        with slot.cond:
            slot.stopped = True
            slot.cond.notify_all()
    for t in threads:
        t.join()
    if watch is not None:
        watch.sample(latency.now_s() - start)
    for f in frames.values():
        f.seconds = seconds
    return frames


def _head_rate(spec: StackSpec, name: str) -> float:
    return spec.models[spec.chain(name)[0]].rate_hz  # type: ignore[return-value]


def _periodic(
    name: str,
    run: Callable[[], Any],
    rate: float,
    start: float,
    end: float,
    frames: Frames,
    done: Callable[[str, float, float], None] | None,
    look: OutputCheck | None,
) -> None:
    period, k, dropped = 1.0 / rate, 0, 0
    total = released(start, end, period)
    label = f"stack {name} frame"
    while k < total:
        arrival = start + k * period
        if not dropped:  # behind (frames dropped), the newest has arrived: no clock to read, no wait
            _sleep_until(arrival)
        begin, ok, out = _timed(run, frames, label)
        finished = latency.now_s()
        if ok:
            frames.add(finished - arrival, finished - begin, begin - start, None)
            if done is not None:
                done(name, arrival, finished)
            _look(look, out, finished - start)
            out = None  # freed before the next run, as a bare loop frees it: the run reuses warm memory
        else:
            frames.drop()  # a failed frame is a miss
        k, dropped = next_frame(k, start, period, finished, total)
        if dropped:
            frames.drop(dropped)
        if frames.errors >= MAX_ERRORS:
            break


def _consume(
    name: str,
    run: Callable[[], Any],
    slot: _Slot,
    frames: Frames,
    done: Callable[[str, float, float], None] | None,
    look: OutputCheck | None,
) -> None:
    label = f"stack {name} frame"
    while True:
        with slot.cond:
            while slot.item is None and not slot.stopped:
                slot.cond.wait()
            if slot.item is None:
                return
            (head, ready), slot.item = slot.item, None
        begin, ok, out = _timed(run, frames, label)
        finished = latency.now_s()
        if ok:
            frames.add(finished - ready, finished - begin, begin - frames.t0, finished - head)
            if done is not None:
                done(name, head, finished)
            _look(look, out, finished - frames.t0)
            out = None
        else:
            frames.drop()
        if frames.errors >= MAX_ERRORS:
            return


def _look(look: OutputCheck | None, out: Any, t: float) -> None:
    """NaN/Inf in the outputs the timed run returned: after the frame is recorded and passed on, never
    inside the timed span, and at most every check_every_s."""
    if look is not None and look.due(t):
        look.look(out, f"at {t:.1f} s")


def _offer(slot: _Slot, frames: Frames, item: tuple[float, float]) -> None:
    """The consumer takes the newest frame: one still waiting is dropped (a miss)."""
    with slot.cond:
        if slot.item is not None:
            frames.drop()
        slot.item = item
        slot.cond.notify()


def _timed(run: Callable[[], Any], frames: Frames, label: str) -> tuple[float, bool, Any]:
    """(when it began, whether it returned, what it returned)."""
    begin = latency.now_s()
    try:
        with tracing.span(label):
            out = run()
    except TimeLimitExceeded:
        raise
    except Exception as e:  # counted, the model goes on: the stack reports it as a failed check
        frames.error(e)
        return begin, False, None
    return begin, True, out


def _sleep_until(t: float) -> None:
    while True:
        left = t - latency.now_s()
        if left <= 0:
            return
        time.sleep(min(left, 0.02))


__all__ = ["best_cases", "run_phase"]
