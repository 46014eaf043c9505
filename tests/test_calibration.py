"""SpeculativeLlama.calibrate on a real model: the batch-cost curve measured at every size a
verify pass can have, believed with its dips, kept in the cost cache; the model's state
after it is a fresh one's."""

import json
import types

import llama_cpp
import pytest

from pyspec.errors import ClosedError, InvalidInputError, PyspecRuntimeError
from pyspec.llama import SpeculativeLlama
from pyspec.llama.batch_decoder import BatchDecoder
from pyspec.llama.drafting import calibration
from pyspec.llama.drafting.calibration import calibrate_once
from pyspec.llama.drafting.cost_cache import cost_cache_file
from pyspec.llama.drafting.costs import validate_ratios
from pyspec.testing.near_tie import compare_texts

KW = dict(n_ctx=512, n_threads=2, verbose=False, seed=0)
# A curve with a dip at 8 tokens, as repacked kernels make (cost over one token).
SHAPE = {1: 1.0, 2: 1.5, 3: 2.0, 4: 2.4, 5: 3.1, 6: 3.6, 7: 4.2, 8: 3.9, 9: 4.8}
BATCHES = {n: c for n, c in SHAPE.items() if n > 1}  # what calibrate() returns for it
PROMPT = (
    "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):"
)


def test_calibration_measures_every_size_and_leaves_generation_unchanged(
    gemma_path, tmp_path, monkeypatch, batch_noise
):
    monkeypatch.setenv("PYSPEC_CACHE", str(tmp_path))
    monkeypatch.setenv("PYSPEC_COST_CACHE", "on")
    sizes = []
    real = BatchDecoder.decode
    # The decodes are real; the clock the measurement reads is this one, which a pass of n
    # tokens moves by SHAPE[n] (the later sweeps' passes are slower: a load that came), so
    # what it makes of the timings is checked exactly, whatever this machine is doing.
    clock = types.SimpleNamespace(now=0.0, sweep_of={})
    monkeypatch.setattr(calibration, "time", types.SimpleNamespace(perf_counter=lambda: clock.now))

    def counting(self, tokens, n_past, n_outputs):
        sizes.append((len(tokens), n_outputs))
        seen = clock.sweep_of[len(tokens)] = clock.sweep_of.get(len(tokens), -1) + 1
        clock.now += SHAPE.get(len(tokens), 50.0) * (1.3 if seen else 1.0)
        return real(self, tokens, n_past, n_outputs)

    llm = SpeculativeLlama(gemma_path, draft="lookup", draft_max=8, **KW)
    before = llm.create_completion(PROMPT, max_tokens=24, temperature=0.0)["choices"][0]["text"]
    monkeypatch.setattr(BatchDecoder, "decode", counting)
    lines = []
    shape = llm.calibrate(progress=lines.append)
    monkeypatch.setattr(BatchDecoder, "decode", real)
    assert shape == pytest.approx({n: c for n, c in SHAPE.items() if n > 1})
    assert validate_ratios(shape) == ""
    # Every size from 1 to draft_max + 1 in each of three sweeps, every row kept as a verify
    # pass keeps them, after one context pass.
    measured = [n for n, outputs in sizes[1:] if n == outputs]
    assert sorted(measured) == sorted(list(range(1, 10)) * 3)
    assert len(lines) == 3 and "sweep 3/3" in lines[2]
    costs = llm.speculation.controller.costs
    assert costs.calibrated and costs.prior_source == "calibrated here"
    # The cache emptied by the measurement is rebuilt: the same greedy text as before, except
    # at a near-tie (the calibrated curve changes the draft lengths, so the batches' shapes).
    after = llm.create_completion(PROMPT, max_tokens=24, temperature=0.0)["choices"][0]["text"]
    plain = llama_cpp.Llama(gemma_path, **KW)
    prompt = plain.tokenize(PROMPT.encode(), special=True)
    compare_texts(plain, prompt, before, after, batch_noise(gemma_path).tie_bound)
    plain.close()
    # The cache file holds the shape as measured (the live request after it patched nothing
    # in), marked calibrated, and a new object starts from it.
    path = cost_cache_file(llm)
    record = json.loads(path.read_text())
    assert record["calibrated"] is True
    assert {int(n): r for n, r in record["ratios"].items()} == pytest.approx(shape)
    llm.close()
    again = SpeculativeLlama(gemma_path, draft="lookup", draft_max=8, **KW)
    assert again.speculation.controller.costs.calibrated
    assert again.speculation.controller.costs.prior_source.startswith("cache")
    # Calibrated already: nothing is measured again unless forced.
    sizes.clear()
    monkeypatch.setattr(BatchDecoder, "decode", counting)
    assert sorted(again.calibrate()) == sorted(shape) and sizes == []
    again.calibrate(force=True)
    assert len(sizes) == 1 + 3 * 9
    monkeypatch.setattr(BatchDecoder, "decode", real)
    again.close()
    # A longer draft_max than the cached shape covers is measured again.
    longer = SpeculativeLlama(gemma_path, draft="lookup", draft_max=12, **KW)
    assert not longer.speculation.controller.costs.calibrated_up_to(13)
    longer.close()


def test_an_implausible_measurement_raises_and_keeps_the_old_prior(
    gemma_path, monkeypatch, tmp_path
):
    llm = SpeculativeLlama(gemma_path, draft="lookup", draft_max=4, **KW)
    costs = llm.speculation.controller.costs
    from pyspec.llama import loop

    # A machine so loaded that a batch of 5 took 50x one token: refused, nothing installed.
    monkeypatch.setattr(loop, "measure_shape", lambda *a, **k: {2: 1.8, 3: 2.4, 4: 3.0, 5: 50.0})
    with pytest.raises(PyspecRuntimeError, match="implausible"):
        llm.calibrate()
    assert not costs.calibrated and costs.prior_source == "default"
    # pyspec generate and serve say so and go on with the online cost model.
    monkeypatch.setenv("PYSPEC_COST_CACHE", "on")
    monkeypatch.setattr(llm.speculation, "_cost_file", tmp_path / "costs.json")
    said = []
    assert calibrate_once(llm, said.append) is False
    assert "calibration failed" in said[-1] and "implausible" in said[-1]
    assert not costs.calibrated and not (tmp_path / "costs.json").exists()
    text = llm.create_completion(PROMPT, max_tokens=8, temperature=0.0)["choices"][0]["text"]
    assert text
    llm.close()


def test_a_context_too_small_for_the_largest_batch_is_refused_before_decoding(gemma_path):
    llm = SpeculativeLlama(gemma_path, draft="lookup", draft_max=8, **dict(KW, n_ctx=64))
    with pytest.raises(InvalidInputError, match="raise n_ctx"):
        llm.calibrate()
    assert not llm.speculation.controller.costs.calibrated
    llm.close()


def test_a_shape_calibrated_elsewhere_is_taken_without_measuring_and_checked(
    gemma_path, tmp_path, monkeypatch
):
    monkeypatch.setenv("PYSPEC_CACHE", str(tmp_path))
    monkeypatch.setenv("PYSPEC_COST_CACHE", "on")
    llm = SpeculativeLlama(gemma_path, draft="lookup", draft_max=8, **KW)
    costs = llm.speculation.controller.costs
    measured = []
    monkeypatch.setattr(BatchDecoder, "decode", lambda *a: measured.append(a))
    # What another object's calibrate() returned, as JSON gives it back (string sizes).
    shape = {str(n): c for n, c in SHAPE.items() if n > 1}
    llm.use_calibration(shape)
    assert costs.calibrated_up_to(9) and costs.prior_source == "given by use_calibration()"
    assert costs.prior_shape() == pytest.approx(BATCHES)
    assert measured == [] and not cost_cache_file(llm).exists()  # nothing measured or written
    # Believed with its dip (8 tokens cheaper than 7) once a one-token pass sets the scale.
    costs.observe(1, 0.05)
    assert costs.predict(8) < costs.predict(7)
    # Not a calibration for this object: refused, the shape in use unchanged.
    wrong = [
        ({n: c for n, c in SHAPE.items() if 2 <= n <= 8}, "from 2 to 9"),  # short of 9
        ({n: c for n, c in SHAPE.items() if n not in (1, 5)}, "from 2 to 9"),  # a gap
        ({2.5: 1.6, **BATCHES}, "not a whole number"),
        ({"2": 1.5, **BATCHES}, "given twice"),
        ({**BATCHES, 3: True}, "not a number"),
        ({**BATCHES, 5: 50.0}, "under load"),  # implausible
        ([1.5, 2.0], "batch sizes to costs"),  # not a mapping
        ({2: "cheap"}, "not a number"),  # not numbers
    ]
    for bad, why in wrong:
        with pytest.raises(InvalidInputError, match=why):
            llm.use_calibration(bad)
        assert costs.prior_shape() == pytest.approx(BATCHES)
    llm.close()
    with pytest.raises(ClosedError):
        llm.use_calibration(shape)
    fixed = SpeculativeLlama(gemma_path, draft="lookup", draft_max=8, adaptive=False, **KW)
    with pytest.raises(InvalidInputError, match="adaptive draft lengths"):
        fixed.use_calibration(shape)
    fixed.close()


class _TimedDecoder:
    """Stands in for a BatchDecoder whose passes the test's clock times: a pass of n tokens
    in sweep s moves the clock by SHAPE[n] times what ``factor(s, n)`` says."""

    capacity = 512

    def __init__(self, clock, factor):
        self.clock, self.factor, self.seen = clock, factor, {}

    def decode(self, tokens, n_past, n_outputs):
        n = len(tokens)
        if n_outputs == n:  # a measured pass (the context pass keeps one row)
            sweep = self.seen[n] = self.seen.get(n, -1) + 1
            self.clock.now += SHAPE[n] * self.factor(sweep, n)

    def remove_from(self, position):
        pass


@pytest.mark.parametrize("lucky_size", [6, 9])
def test_a_lucky_sweep_does_not_make_a_size_look_cheap(monkeypatch, lucky_size):
    # On a shared VM a size's passes spread by 20% from sweep to sweep, and the controller
    # drafts the length it believes cheapest per token: the fastest pass per size made the
    # luckiest sizes look cheap (37 and 44 tokens at 14-15x one token, paid 18-22x live).
    # One sweep where a size ran at half its cost, one where every size ran 1.3x slower:
    # the median of three keeps the curve (the fastest pass would halve that size).
    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(calibration, "time", types.SimpleNamespace(perf_counter=lambda: clock.now))

    def factor(sweep, n):
        if sweep == 0 and n == lucky_size:
            return 0.5
        return 1.3 if sweep == 2 else 1.0

    decoder = _TimedDecoder(clock, factor)
    shape = calibration.measure_shape(decoder, [1, 2, 3], max(SHAPE), passes=3)
    assert shape == pytest.approx({n: c for n, c in SHAPE.items() if n > 1})
    assert calibration.PASSES == 3


class _DepthDecoder:
    """A cache that holds tokens at consecutive positions, as llama.cpp's does: a pass of n
    tokens after d of context costs SHAPE[n] * (1 + DEEPER[n] * d) seconds times the
    sweep's factor. It refuses a decode that does not continue what it holds."""

    capacity = 100  # below the deepest context: that context is decoded in chunks

    def __init__(self, clock, factor):
        self.clock, self.factor = clock, factor
        self.held, self.sweep, self.passes_seen = 0, 0, []

    @property
    def depths_seen(self):
        """The depths of the measured passes, each run of one depth once."""
        depths = [d for d, _ in self.passes_seen]
        return [d for i, d in enumerate(depths) if i == 0 or depths[i - 1] != d]

    def decode(self, tokens, n_past, n_outputs):
        assert n_past == self.held, "decoded at a position the cache does not continue"
        n = len(tokens)
        assert 1 <= n <= self.capacity
        if n_outputs == n and n_past in DEPTHS:  # a measured pass (context keeps one row)
            self.passes_seen.append((n_past, n))
            self.clock.now += SHAPE[n] * (1 + DEEPER[n] * n_past) * self.factor(self.sweep)
        self.held += n

    def remove_from(self, position):
        self.held = min(self.held, position)


DEPTHS = (64, 300, 250)  # (given in any order)
DEEPER = {n: 0.0002 * n for n in SHAPE}  # a batch's cost grows with depth, more so the longer


def test_costs_at_several_depths_are_measured_each_against_its_own_one_token_pass(monkeypatch):
    # Long batches cost more after a long context than after the calibration's 64 tokens
    # (48 tokens 20.0x one token at 64, 21.5x at 800, on the AVX2 Zen 3): each depth's
    # sizes read against that depth's one-token pass, the sizes and the depths in the
    # opposite order every other sweep, the context grown or cut to each depth in turn.
    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(calibration, "time", types.SimpleNamespace(perf_counter=lambda: clock.now))
    decoder = _DepthDecoder(clock, lambda sweep: 1.4 if sweep == 1 else 1.0)
    lines = []

    def progress(line):
        lines.append(line)
        decoder.sweep += 1

    times = calibration.measure_at_depths(
        decoder, [5, 6, 7], [9, 1, 2, 5], DEPTHS, passes=3, progress=progress
    )
    assert sorted(times) == [64, 250, 300]
    for depth, by_size in times.items():
        assert sorted(by_size) == [1, 2, 5, 9] and all(len(t) == 3 for t in by_size.values())
        cost = {n: SHAPE[n] * (1 + DEEPER[n] * depth) for n in by_size}
        assert calibration.ratios_of(by_size) == pytest.approx(
            {n: cost[n] / cost[1] for n in by_size}
        )
    # (up, down, up: each sweep starts at the depth the last one ended at)
    assert decoder.depths_seen == [64, 250, 300, 250, 64, 250, 300]
    up, down = [1, 2, 5, 9], [9, 5, 2, 1]  # the sizes turn with the depths
    assert decoder.passes_seen == (
        [(d, n) for d in (64, 250, 300) for n in up]
        + [(d, n) for d in (300, 250, 64) for n in down]
        + [(d, n) for d in (64, 250, 300) for n in up]
    )
    assert decoder.held == 0  # the cache is left empty
    assert lines[1].startswith("sweep 2/3 over batch sizes 1-9 at 64, 250, 300 tokens")
    with pytest.raises(ValueError, match="must include 1"):
        calibration.measure_at_depths(decoder, [5], [2, 3], [64])
    with pytest.raises(ValueError, match="passes >= 1"):
        calibration.measure_at_depths(decoder, [5], [1, 2], [64], passes=0)
    with pytest.raises(ValueError, match="more than the decoder's 100"):
        calibration.measure_at_depths(decoder, [5], [1, 101], [64])
    assert decoder.passes_seen[-1] == (300, 9)  # (the refused calls measured nothing)


FREE_TEXT = "The history of the Roman empire"  # (base model: little to copy early on)


@pytest.mark.parametrize("batch_of_two", [0.75, 1.5])
def test_a_filler_is_verified_only_where_a_draft_costs_less_than_a_plain_pass(
    gemma_path, tmp_path, monkeypatch, batch_noise, batch_of_two
):
    """A round with nothing to draft verifies a filler token where the calibrated shape says
    a pass over two tokens costs less than one over one (llama.cpp's AMX kernels on one
    thread, session 49); elsewhere it stays plain. The text is the target's either way."""
    monkeypatch.setenv("PYSPEC_CACHE", str(tmp_path))
    llm = SpeculativeLlama(gemma_path, draft="lookup", draft_max=8, memory=False, **KW)
    # (live passes correct the shape: on this machine's real costs the filler stops once
    # they outweigh it; the first rounds follow the shape)
    llm.use_calibration({n: batch_of_two if n == 2 else 0.5 + 0.25 * n for n in range(2, 10)})
    text = llm.create_completion(FREE_TEXT, max_tokens=32, temperature=0.0)["choices"][0]["text"]
    fillers = "filler" in llm.speculation.last.cost_model
    assert fillers == (batch_of_two < 1), llm.speculation.last.cost_model
    plain = llama_cpp.Llama(gemma_path, **KW)
    reference = plain.create_completion(FREE_TEXT, max_tokens=32, temperature=0.0)
    prompt = plain.tokenize(FREE_TEXT.encode(), special=True)
    compare_texts(
        plain, prompt, reference["choices"][0]["text"], text, batch_noise(gemma_path).tie_bound
    )
    plain.close()
    llm.close()
