"""pyspec.verify with dense draft probabilities (modified rejection sampling).

The drafts are drawn from a slightly perturbed copy of the target's distribution, so a
draft may be rejected: ``n_accepted`` (in extra_info) says how many rows the call reads.
"""

import pytest
from _results import THREAD_CHOICES, measure
from _workloads import DRAFT_PROBS_CASES, verify_call


@pytest.mark.parametrize("n_threads", THREAD_CHOICES, ids=lambda t: f"threads-{t or 'default'}")
@pytest.mark.parametrize("case", DRAFT_PROBS_CASES, ids=str)
def bench_verify_draft_probs(benchmark, workloads, results, case, n_threads):
    inp = workloads.verify_input(case)
    result = measure(benchmark, case, verify_call(inp, case.params, n_threads))
    assert 0 <= result.n_accepted <= case.k
    results.add_verify(case, n_threads, benchmark, inp.logits.nbytes, result.n_accepted)
