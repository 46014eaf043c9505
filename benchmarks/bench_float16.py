"""pyspec.verify on float16 logits (the real logits, cast before timing), all accepted."""

import pytest
from _results import THREAD_CHOICES, measure
from _workloads import FLOAT16_CASES, verify_call


@pytest.mark.parametrize("n_threads", THREAD_CHOICES, ids=lambda t: f"threads-{t or 'default'}")
@pytest.mark.parametrize("case", FLOAT16_CASES, ids=str)
def bench_verify_float16(benchmark, workloads, results, case, n_threads):
    inp = workloads.verify_input(case)
    result = measure(benchmark, case, verify_call(inp, case.params, n_threads))
    assert result.n_accepted == case.k
    results.add_verify(case, n_threads, benchmark, inp.logits.nbytes, result.n_accepted)
