import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
# Tests measure the target's batch costs afresh: costs cached on disk by earlier runs (or by
# the user's own) would make a test's decisions depend on this machine's history. The test of
# the cache turns it back on in a temporary directory.
os.environ["PYSPEC_COST_CACHE"] = "off"


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def qwen_path():
    from pyspec.testing.models import ensure_model

    return str(ensure_model("qwen2.5-coder-1.5b"))


@pytest.fixture(scope="session")
def gemma_path():
    from pyspec.testing.models import ensure_model

    return str(ensure_model("gemma3-270m"))


def _real_logits(path, prompt, n_rows):
    """The last n_rows logit rows of a real model evaluating a real prompt."""
    import llama_cpp

    llm = llama_cpp.Llama(
        model_path=path, n_ctx=256, n_batch=256, logits_all=True, verbose=False, n_threads=2
    )
    tokens = llm.tokenize(prompt.encode())
    llm.eval(tokens)
    rows = np.array(llm.scores[len(tokens) - n_rows : len(tokens)], dtype=np.float32)
    llm.close()
    return rows


CODE_PROMPT = (
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'
    "    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n"
    "def factorial(n):\n"
)


@pytest.fixture(scope="session")
def qwen_logits(qwen_path):
    return _real_logits(qwen_path, CODE_PROMPT, 9)


@pytest.fixture(scope="session")
def gemma_logits(gemma_path):
    return _real_logits(gemma_path, CODE_PROMPT, 9)


@pytest.fixture(scope="session")
def batch_noise():
    """``batch_noise(model_path)``: how far this build's batched logits are from one-token
    logits for that model (pyspec.testing.near_tie), measured once per session. Every test
    that compares outputs across batch shapes takes its near-tie bound from here."""
    import llama_cpp

    from pyspec.testing.near_tie import measure_batch_noise

    measured = _MEASURED_NOISE

    def measure(path):
        if path not in measured:
            llm = llama_cpp.Llama(model_path=path, n_ctx=1024, n_threads=2, verbose=False)
            try:
                measured[path] = measure_batch_noise(llm)
            finally:
                llm.close()
        return measured[path]

    return measure


_MEASURED_NOISE: dict = {}  # model path -> BatchNoise, filled by the batch_noise fixture


def pytest_terminal_summary(terminalreporter):
    """The near-tie bounds this run measured, so a log says what the rule allowed here."""
    if _MEASURED_NOISE:
        terminalreporter.write_sep("-", "batch-shape noise measured on this build")
        for path, noise in sorted(_MEASURED_NOISE.items()):
            terminalreporter.write_line(f"{os.path.basename(path)}: {noise.describe()}")
