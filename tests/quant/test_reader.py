"""Samples stream lazily: deploykit's calibrator and the readers it hands to quantizers."""

import numpy as np
import pytest

from deploykit.errors import DataError
from deploykit.quant.reader import SampleStream, replay_reader, streaming_reader


class CountingSource:
    """A re-iterable source that counts the samples it has produced (and holds none)."""

    def __init__(self, n):
        self.n, self.pulled = n, 0

    def __iter__(self):
        for i in range(self.n):
            self.pulled += 1
            yield {"x": np.full((1, 2), i, np.float32)}


def test_stream_is_reiterable_limited_and_counts_what_it_saw():
    src = CountingSource(5)
    stream = SampleStream(src, limit=3)
    assert [int(s["x"][0, 0]) for s in stream] == [0, 1, 2]
    assert [int(s["x"][0, 0]) for s in stream] == [0, 1, 2]
    assert stream.seen == 3


def test_stream_refuses_a_one_shot_iterator_and_an_empty_source():
    with pytest.raises(TypeError, match="re-iterable"):
        SampleStream(iter([{"x": np.zeros(1)}]))
    with pytest.raises(DataError, match="no samples"):
        list(SampleStream([], what="calibration"))


def test_streaming_reader_pulls_one_sample_at_a_time():
    src = CountingSource(100)
    reader = streaming_reader(SampleStream(src))
    first = reader.get_next()
    assert first is not None and src.pulled == 1  # lazily: nothing read ahead
    while reader.get_next() is not None:
        pass
    assert src.pulled == 100
    assert reader.get_next() is not None  # a new pass starts after the end


def test_replay_reader_rewinds_itself_for_the_next_consumer():
    samples = [{"x": np.zeros(1)}, {"x": np.ones(1)}]
    reader = replay_reader(samples)
    first_pass = [reader.get_next(), reader.get_next(), reader.get_next()]
    assert first_pass[2] is None
    assert reader.get_next()["x"] is samples[0]["x"]  # ModelOpt reads its reader more than once


def test_readers_offer_modelopts_get_first_without_advancing():
    """ModelOpt calls get_first() for one shape-finding inference on graphs with MatMul/Gemm."""
    samples = [{"x": np.zeros(1)}, {"x": np.ones(1)}]
    reader = replay_reader(samples)
    assert reader.get_first()["x"] is samples[0]["x"]
    assert reader.get_next()["x"] is samples[0]["x"]  # get_first did not advance
    assert reader.get_first()["x"] is samples[0]["x"]
    assert reader.get_next()["x"] is samples[1]["x"]
    src = CountingSource(10)
    streaming = streaming_reader(SampleStream(src))
    assert int(streaming.get_first()["x"][0, 0]) == 0
    assert int(streaming.get_next()["x"][0, 0]) == 0
    assert int(streaming.get_next()["x"][0, 0]) == 1
