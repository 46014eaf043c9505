"""The demo's choice between the draft model and prompt lookup (pyspec/llama/drafting/choice.py),
from the machine's batch costs or from what an earlier run realised."""

from types import SimpleNamespace

import pytest

from pyspec.llama.drafting.choice import PAYS, draft_model_outlook, predicted_speedup
from pyspec.llama.drafting.cost_cache import drafter_cache_file, save_drafter_record
from pyspec.llama.drafting.costs import BatchCosts


def test_the_prediction_follows_the_batch_costs_and_the_draft_cost():
    cheap = lambda n: 1.0 + 0.05 * (n - 1)  # noqa: E731  (a memory-bound machine)
    dear = lambda n: float(n)  # noqa: E731  (batches as dear as their tokens)
    fast, k = predicted_speedup(cheap, 0.1)
    assert fast > 2.0 and k > 4
    assert predicted_speedup(dear, 0.1) == (1.0, 0)  # nothing beats plain decoding
    assert predicted_speedup(cheap, 0.9)[0] < fast  # a dear draft gains less
    # acceptance 0.8, k=1: 1.8 tokens for a pass of 2 (1.05) and a draft (0.1)
    assert predicted_speedup(cheap, 0.1, draft_max=1) == (pytest.approx(1.8 / 1.15), 1)


def _spec(tmp_path, ratios, source="cache x.json"):
    costs = BatchCosts(max_n=17)
    if ratios:
        costs.use_prior(ratios, source=source)
    return SimpleNamespace(
        _cost_file=tmp_path / "costs" / "target-abc.json", controller=SimpleNamespace(costs=costs)
    )


def test_the_outlook_reads_the_cached_shape_and_says_so(tmp_path):
    target, draft = tmp_path / "target.gguf", tmp_path / "draft.gguf"
    target.write_bytes(b"t" * 1000)
    draft.write_bytes(b"d" * 100)  # a tenth of the target: drafts at 0.1x a target token
    cheap = draft_model_outlook(
        _spec(tmp_path, {2: 1.05, 5: 1.2, 9: 1.4, 17: 1.8}), str(target), str(draft)
    )
    assert cheap.pays and not cheap.realised and "measured on this machine" in cheap.why
    # Calibrated in this process (pyspec generate calibrates before it chooses): measured too.
    calibrated = _spec(tmp_path, {2: 1.05, 5: 1.2, 9: 1.4, 17: 1.8}, source="calibrated here")
    outlook = draft_model_outlook(calibrated, str(target), str(draft))
    assert "measured on this machine" in outlook.why
    dear = draft_model_outlook(_spec(tmp_path, None), str(target), str(draft))
    assert not dear.pays and "the default curve" in dear.why  # the default prior is dear


def test_a_realised_gain_decides_over_the_prediction(tmp_path):
    target, draft = tmp_path / "target.gguf", tmp_path / "draft.gguf"
    target.write_bytes(b"t" * 1000)
    draft.write_bytes(b"d" * 100)
    spec = _spec(tmp_path, {2: 1.05, 5: 1.2, 9: 1.4, 17: 1.8})  # predicted to pay
    path = drafter_cache_file(spec._cost_file, SimpleNamespace(model_path=str(draft)))
    save_drafter_record(path, {"balance": 0.0, "speculative_gain": 0.9, "speculative_rounds": 40.0})
    outlook = draft_model_outlook(spec, str(target), str(draft))
    assert outlook.realised and not outlook.pays and "0.90x" in outlook.why
    save_drafter_record(path, {"speculative_gain": PAYS + 0.2, "speculative_rounds": 40.0})
    assert draft_model_outlook(spec, str(target), str(draft)).pays
    save_drafter_record(path, {"speculative_gain": 0.5, "speculative_rounds": 3.0})
    assert not draft_model_outlook(spec, str(target), str(draft)).realised  # too few rounds
