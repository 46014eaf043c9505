"""The baselines each verify configuration is compared with, on the very same arrays."""

import pytest
from _results import measure
from _workloads import CHAIN_CASES, READ_PASS_CASES, llama_chain, read_pass


@pytest.mark.parametrize("case", READ_PASS_CASES, ids=lambda c: str(c).rsplit("-", 1)[0])
def bench_read_pass(benchmark, workloads, results, case):
    """np.max over each row: one read of every logit, the cost floor of a one-pass verifier."""
    logits = workloads.logits(case)
    measure(benchmark, case, read_pass(logits))
    results.add_read_pass(case, benchmark, logits.nbytes)


@pytest.mark.parametrize("case", CHAIN_CASES, ids=str)
def bench_llama_chain(benchmark, workloads, results, case):
    """llama.cpp's sampler chain on each of the k + 1 rows: what llama-cpp-python does today."""
    logits = workloads.logits(case)
    measure(benchmark, case, llama_chain(logits, case.params))
    results.add_chain(case, benchmark, logits.nbytes)
