"""pyspec.verify with point-mass drafts (float32, real and random logits), all accepted."""

import pytest
from _results import THREAD_CHOICES, measure
from _workloads import MAIN_CASES, verify_call


@pytest.mark.parametrize("n_threads", THREAD_CHOICES, ids=lambda t: f"threads-{t or 'default'}")
@pytest.mark.parametrize("case", MAIN_CASES, ids=str)
def bench_verify(benchmark, workloads, results, case, n_threads):
    inp = workloads.verify_input(case)
    result = measure(benchmark, case, verify_call(inp, case.params, n_threads))
    # The drafts were chosen so every one is accepted: the worst case, all k + 1 rows read.
    assert result.n_accepted == case.k
    results.add_verify(case, n_threads, benchmark, inp.logits.nbytes, result.n_accepted)
