"""pyspec.testing.tiny_gguf: the random-weight model the device checks carry (real models are
over the carry limit) loads in llama.cpp, gives rows as wide as its vocabulary with a
real model's spread, and runs the in-graph sampler like a real model."""

import ctypes

import numpy as np
import pytest

pytest.importorskip("gguf")  # a test dependency (pyproject's [test] extra)

from pyspec.llama import SpeculativeLlama
from pyspec.testing.tiny_gguf import write_tiny_llama


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(
        write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny.gguf", n_vocab=4096, seed=1)
    )


def test_rows_are_vocabulary_wide_and_spread_like_a_real_model(tiny):
    llm = SpeculativeLlama(tiny, n_ctx=256, n_threads=2, verbose=False, sampling="host")
    try:
        assert llm.n_vocab() == 4096
        dec = llm.speculation.decoder
        dec.remove_from(0)
        addr = dec.decode(list(range(300, 309)), 0, 9)
        rows = np.ctypeslib.as_array((ctypes.c_float * (9 * 4096)).from_address(addr)).reshape(
            9, 4096
        )
        assert np.isfinite(rows).all()
        assert 1.0 < float(rows.std(axis=1).mean()) < 5.0
        assert len({int(r.argmax()) for r in rows}) > 1  # the rows differ with the context
        out = llm.create_completion(list(range(300, 340)) * 2, max_tokens=16, seed=2)
        assert out["usage"]["completion_tokens"] == 16
    finally:
        llm.close()


def test_the_same_seed_writes_the_same_file(tmp_path):
    a = write_tiny_llama(tmp_path / "a.gguf", n_vocab=512, seed=3).read_bytes()
    b = write_tiny_llama(tmp_path / "b.gguf", n_vocab=512, seed=3).read_bytes()
    c = write_tiny_llama(tmp_path / "c.gguf", n_vocab=512, seed=4).read_bytes()
    assert a == b and a != c
    with pytest.raises(ValueError, match="n_vocab must be at least"):
        write_tiny_llama(tmp_path / "d.gguf", n_vocab=100)
