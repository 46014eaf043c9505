"""SpeculationStats: what the rounds add up to, and what the summary and totals say."""

from pyspec.llama.rounds import Round
from pyspec.llama.stats import SpeculationStats


def _rounds():
    # one plain round, one that verified 3 drafts and kept 2, one that kept all 4
    return [
        Round(emitted=1, batch=1, target_seconds=0.05, round_seconds=0.06),
        Round(offered=3, verified=3, accepted=2, emitted=3, batch=4, round_seconds=0.08),
        Round(offered=4, verified=4, accepted=4, emitted=5, batch=5, round_seconds=0.10),
    ]


def test_decode_rate_is_the_rounds_tokens_over_their_own_time():
    stats = SpeculationStats(drafter="lookup", emitted=10)
    for r in _rounds():
        stats.add_round(r)
    assert stats.round_tokens == 9 and abs(stats.round_seconds - 0.24) < 1e-12
    assert abs(stats.decode_rate - 9 / 0.24) < 1e-9
    assert stats.drafted == 7 and stats.accepted == 6 and stats.verify_steps == 2
    assert SpeculationStats().decode_rate == 0.0  # no round ran: no rate, no division


def test_summary_names_the_drafter_and_the_rate():
    stats = SpeculationStats(drafter="lookup+draft-model", emitted=10)
    for r in _rounds():
        stats.add_round(r)
    text = stats.summary()
    assert text.startswith("lookup+draft-model: drafted 7, accepted 6")
    assert "37.50 tok/s after the first" in text
    assert "tok/s" not in SpeculationStats(drafter="lookup").summary()  # no rounds: no rate


def test_totals_add_rounds_and_keep_the_last_drafter_name():
    total = SpeculationStats()
    for name in ("lookup", "draft-model"):
        one = SpeculationStats(drafter=name, emitted=10)
        for r in _rounds():
            one.add_round(r)
        total.add(one)
    assert total.drafter == "draft-model"
    assert total.round_tokens == 18 and abs(total.decode_rate - 18 / 0.48) < 1e-9
    assert total.as_dict()["decode_rate"] == total.decode_rate


def test_tokens_per_step_of_a_running_total_counts_no_first_token():
    # three requests, each all plain rounds: one token a step, in each and in the total
    # (emitted - 1 over the total's steps said 1.02 with nothing drafted: a newcomer's walk)
    total = SpeculationStats()
    for _ in range(3):
        one = SpeculationStats(emitted=33)
        for _ in range(32):
            one.add_round(Round(emitted=1, batch=1, round_seconds=0.01))
        assert one.tokens_per_verify_step == 1.0
        total.add(one)
    assert total.tokens_per_verify_step == 1.0 and total.plain_steps == 96


def test_server_metrics_rate_is_the_answers_own_rate():
    # /metrics' generation rate over two answers is their rounds' tokens over the rounds'
    # time, as each answer's decode_tokens_per_second, not over draft + target + verify time
    from pyspec.serve.metrics import Metrics

    metrics = Metrics()
    for _ in range(2):
        one = SpeculationStats(drafter="lookup", emitted=10)
        for r in _rounds():
            one.add_round(r)
        metrics.add("m", one)
    line = next(
        x
        for x in metrics.prometheus_text().splitlines()
        if x.startswith('pyspec_generation_tokens_per_second{model="m"}')
    )
    assert abs(float(line.split()[-1]) - 18 / 0.48) < 1e-6
