"""A costly drafter never costs more than 3% over plain decoding
(pyspec/llama/drafting/loss_budget.py), on simulated machines where it loses and where it
pays (no model needed: the controller is the one the loop uses, fed the Round records the
loop feeds it)."""

import numpy as np
import pytest

from pyspec.llama.drafting.adaptive import COSTLY_DRAFTER, DraftLengthController
from pyspec.llama.drafting.loss_budget import FRACTION, LossBudget
from pyspec.llama.rounds import Round


def simulate(
    batch_cost,
    draft_cost,
    acceptance,
    *,
    prompt=400,
    rounds=3000,
    fraction=FRACTION,
    record=None,
    seed=0,
):
    """(plain-decoding time / actual time, the controller, decisions) for a generation
    on a machine where a plain round costs 1.0, a verify pass of n tokens batch_cost(n), a
    draft token draft_cost, and the draft model's catch-up on n tokens (one batch)
    draft_cost x batch_cost(n): the draft model batches as the target does."""
    rng = np.random.default_rng(seed)
    c = DraftLengthController(0, 8, watch=COSTLY_DRAFTER)
    # The batch curve's shape as the cost cache gives it after a first process.
    c.use_cost_prior({n: batch_cost(n) / batch_cost(1) for n in (2, 3, 5, 9)})
    c.budget = LossBudget(fraction=fraction)
    c.draft_cost_ratio = draft_cost
    if record:
        c.use_drafter_record(record)
    behind, tokens, spent, decisions = prompt, 0, 0.0, []
    for _ in range(rounds):
        k = c.choose(64, catch_up=behind)
        decisions.append(k)
        if k == 0:
            seconds = batch_cost(1)
            r = Round(emitted=1, batch=1, target_seconds=seconds, round_seconds=seconds)
            behind += 1
        else:
            catch = draft_cost * batch_cost(behind)
            accepted = 0
            while accepted < k and rng.random() < acceptance:
                accepted += 1
            target = batch_cost(k + 1)
            seconds = catch + k * draft_cost + target
            r = Round(
                offered=k,
                verified=k,
                accepted=accepted,
                emitted=accepted + 1,
                batch=k + 1,
                target_seconds=target,
                draft_seconds=catch + k * draft_cost,
                drafter_tokens=k,
                drafter_seconds=k * draft_cost,
                catch_up_tokens=behind,
                catch_up_seconds=catch,
                round_seconds=seconds,
            )
            behind = 1 if accepted < k else 2
        tokens += r.emitted
        spent += r.round_seconds
        c.observe(r)
    return tokens * batch_cost(1) / spent, c, decisions


def test_a_drafter_that_loses_costs_at_most_the_budget():
    # Batches as dear as their tokens (a compute-bound CPU), a draft 40% of the target, and
    # drafts mostly wrong; a 400-token prompt to catch up on first.
    ratio, c, decisions = simulate(lambda n: float(n), 0.4, 0.3, rounds=1000)
    assert ratio >= 1 / (1 + FRACTION) - 0.005, c.describe()
    # The same world without the budget loses more: the check above can fail.
    unbounded, _, _ = simulate(lambda n: float(n), 0.4, 0.3, rounds=1000, fraction=1e9)
    assert unbounded < 1 / (1 + FRACTION) - 0.005


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_drafter_that_pays_is_not_held_back(seed):
    # Cheap batches, a cheap draft, good drafts: the budget lets it start soon after the
    # prompt and the gains keep it going.
    ratio, c, decisions = simulate(lambda n: 1.0 + 0.1 * (n - 1), 0.1, 0.9, prompt=100, seed=seed)
    assert ratio > 2.0, c.describe()
    first = next(i for i, k in enumerate(decisions) if k)
    assert first < 150 and np.mean([k > 0 for k in decisions[first:]]) > 0.9, c.describe()
    assert c.budget.balance >= c.budget.cap


def test_an_unaffordable_first_probe_waits_and_says_why():
    c = DraftLengthController(0, 8, watch=COSTLY_DRAFTER)
    c.draft_cost_ratio = 0.1
    c.use_cost_prior({2: 1.1, 3: 1.2, 5: 1.4, 9: 1.8})  # batches that make drafting pay
    for _ in range(3):
        c.record_target(1, 1.0)
    for _ in range(4):
        c.choose(64, catch_up=400)
    assert c.choose(64, catch_up=400) == 0
    assert "loss budget" in c.last_reason and "400 tokens to catch up" in c.last_reason


def test_credit_from_an_earlier_process_lets_a_drafter_that_paid_start_at_once():
    fresh_ratio, _, fresh = simulate(lambda n: 1.0 + 0.1 * (n - 1), 0.1, 0.9, rounds=300)
    record = {"balance": 5.0, "draft_cost_ratio": 0.1, "catch_up_ratio_long": 0.011}
    ratio, _, carried = simulate(lambda n: 1.0 + 0.1 * (n - 1), 0.1, 0.9, rounds=300, record=record)
    first = lambda d: next(i for i, k in enumerate(d) if k)  # noqa: E731
    assert first(carried) < first(fresh) and ratio > fresh_ratio


def test_the_record_round_trips_through_the_cache(tmp_path):
    from pyspec.llama.drafting.cost_cache import load_drafter_record, save_drafter_record

    _, c, _ = simulate(lambda n: 1.0 + 0.1 * (n - 1), 0.1, 0.9, rounds=200)
    record = c.drafter_record()
    assert record["balance"] > 0 and record["draft_cost_ratio"] == pytest.approx(0.1)
    path = tmp_path / "costs" / "target-draft.json"
    save_drafter_record(path, record)
    assert load_drafter_record(path) == pytest.approx(record)
    path.write_text('{"balance": NaN}')
    assert load_drafter_record(path) == {}
    path.write_text("not json")
    assert load_drafter_record(path) == {}


def test_the_doctor_reads_a_draft_models_record_as_one_not_as_batch_costs(
    monkeypatch, tmp_path, capsys
):
    """The cost cache holds a target's batch costs and, beside them, what a draft model
    learned (``drafter_cache_file``); the doctor checks each kind by its own reader, so a
    valid record is not reported as unreadable (nor offered for deletion), a broken one is."""
    from types import SimpleNamespace

    from pyspec.llama.drafting.cost_cache import (
        drafter_cache_file,
        is_drafter_record,
        save_drafter_record,
    )
    from pyspec.tools.doctor import WARN, Report, check_cost_cache

    monkeypatch.setenv("PYSPEC_COST_CACHE", "on")
    monkeypatch.setenv("PYSPEC_CACHE", str(tmp_path))
    costs = tmp_path / "costs"
    costs.mkdir()
    target = costs / "target-q4_k_m-0123456789abcdef0123.json"
    target.write_text('{"format": 2, "ratios": {"2": 1.5, "3": 1.9}}')
    draft = tmp_path / "draft.gguf"
    draft.write_bytes(b"GGUF")
    record = drafter_cache_file(target, SimpleNamespace(model_path=str(draft)))
    assert is_drafter_record(record) and not is_drafter_record(target)
    save_drafter_record(record, {"balance": 0.37, "draft_cost_ratio": None})

    def checked():
        report = Report()
        check_cost_cache(report)
        return [line for line in report.lines if line[0] == WARN], report.lines[-1][2]

    warnings, summary = checked()
    assert warnings == [], warnings
    assert "1 batch-cost file(s)" in summary and "1 draft-model record(s), 1 valid" in summary
    record.write_text('{"balance": "lots"}')
    warnings, summary = checked()
    assert [w[2].split(":")[0] for w in warnings] == [record.name]
    assert "1 draft-model record(s), 0 valid" in summary
