"""The command line, end to end on a real model."""

import json
import re
import subprocess
import sys
import time

import pytest
from pyspec_cli import run_pyspec

from pyspec.testing.models import MODELS, ensure_model

pytestmark = pytest.mark.model


def test_generate_streams_text_and_prints_statistics(qwen_path):
    out = run_pyspec(
        "generate",
        "-m",
        qwen_path,
        "--lookup",
        "-n",
        "24",
        "--temp",
        "0",
        "-p",
        "<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()  # the generated text
    assert "drafted" in out.stderr and "tokens per target step" in out.stderr
    assert "tok/s" in out.stderr


def test_generate_uses_the_chat_template_and_says_so(qwen_path, tmp_path):
    out = run_pyspec("generate", "-m", qwen_path, "-p", "Say hi.", "-n", "8", "--temp", "0")
    assert out.returncode == 0, out.stderr
    assert "prompt in the model chat template" in out.stderr and out.stdout.strip()
    raw = run_pyspec(
        "generate", "-m", qwen_path, "-p", "Say hi.", "-n", "8", "--temp", "0", "--raw"
    )
    assert raw.returncode == 0 and "prompt as given (raw)" in raw.stderr
    assert raw.stdout != out.stdout  # the template changed what the model saw
    # a prompt from a file, and from standard input, with a system message
    path = tmp_path / "prompt.txt"
    path.write_text("Say hi.")
    from_file = run_pyspec("generate", "-m", qwen_path, "-f", str(path), "-n", "8", "--temp", "0")
    assert from_file.stdout == out.stdout
    stdin = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyspec",
            "generate",
            "-m",
            qwen_path,
            "-f",
            "-",
            "-n",
            "8",
            "--temp",
            "0",
            "--system",
            "Answer in French.",
        ],
        input="Say hi.",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert stdin.returncode == 0 and stdin.stdout.strip() and stdin.stdout != out.stdout
    bad = run_pyspec("generate", "-m", qwen_path, "-p", "hi", "--system", "x", "--raw")
    assert bad.returncode == 2 and "--system needs the chat template" in bad.stderr


def test_generate_gives_its_default_request_to_the_models_own_template(gemma_path):
    """The default request was written in Qwen's chat template and given raw to every
    model: Gemma 3 270M answered with the template's markers as text (a newcomer's walk,
    session 49). It has no chat template: the request goes raw, without Qwen's markers."""
    out = run_pyspec("generate", "-m", gemma_path, "-n", "12", "--temp", "0")
    assert out.returncode == 0, out.stderr
    assert "prompt as given (raw)" in out.stderr and "chat template already" not in out.stderr
    assert out.stdout.strip() and "<|im_" not in out.stdout


def test_plain_no_draft_and_compare_modes(gemma_path):
    prompt = "# file: a.py\nx = 1\ny = 2\nz = 3\n# file: b.py (copy of a.py)\nx = 1\n"
    plain = run_pyspec("generate", "-m", gemma_path, "-p", prompt, "-n", "16", "--plain")
    assert plain.returncode == 0, plain.stderr
    assert "llama-cpp-python's own loop" in plain.stderr and "drafted" not in plain.stderr
    no_draft = run_pyspec("generate", "-m", gemma_path, "-p", prompt, "-n", "16", "--no-draft")
    assert no_draft.returncode == 0 and "drafted 0" in no_draft.stderr
    assert "0 verify" in no_draft.stderr and no_draft.stdout == plain.stdout
    compare = run_pyspec("generate", "-m", gemma_path, "-p", prompt, "-n", "16", "--compare")
    assert compare.returncode == 0, compare.stderr
    assert re.search(
        r"plain llama-cpp-python: \d+ tokens, [\d.]+ tok/s after the first", compare.stderr
    )
    assert ("the two texts are the same" in compare.stderr) != (
        "the texts differ from character" in compare.stderr
    )
    # llama.cpp's own warnings stay silent without --verbose
    assert "llama_kv_cache" not in plain.stderr + no_draft.stderr + compare.stderr
    loud = run_pyspec("generate", "-m", gemma_path, "-p", prompt, "-n", "2", "--verbose")
    assert "llama_kv_cache" in loud.stderr


def test_flash_attention_is_on_unless_turned_off(gemma_path):
    # llama.cpp's own tools run with flash attention; llama-cpp-python leaves it off unless
    # asked. The CLI asks, in every mode, and llama.cpp's context log says what it got.
    for mode in ("--lookup", "--plain"):
        on = run_pyspec("generate", "-m", gemma_path, "-p", "x", "-n", "2", mode, "--verbose")
        assert on.returncode == 0, on.stderr
        assert re.search(r"llama_context: flash_attn\s*=\s*enabled", on.stderr), mode
        assert "flash attention on" in on.stderr
        off = run_pyspec(
            "generate", "-m", gemma_path, "-p", "x", "-n", "2", mode, "--verbose", "--no-flash-attn"
        )
        assert off.returncode == 0, off.stderr
        assert re.search(r"llama_context: flash_attn\s*=\s*disabled", off.stderr), mode
        assert "flash attention off" in off.stderr


def test_demo_picks_the_drafter_that_pays_and_says_why():
    # No earlier run is known here (the tests keep the cost cache off): the draft model's
    # outlook comes from the default batch curve, on which a 0.5B draft for a 1.5B target
    # does not pay, so the demo uses prompt lookup and says why.
    out = run_pyspec("demo", "-n", "24")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() and "drafted" in out.stderr
    assert "pyspec: drafter: prompt lookup (free drafts), not the draft model" in out.stderr
    assert "predicted" in out.stderr and "--draft-model runs it anyway" in out.stderr
    # Its prompt is given raw because it is templated already, and it says so.
    assert "prompt as given (raw: it is in a chat template already)" in out.stderr
    # --draft-model runs it under its loss budget, and says why it barely drafted if so.
    out = run_pyspec("demo", "--draft-model", "-n", "24")
    assert out.returncode == 0, out.stderr
    assert "with draft model" in out.stderr and "loss budget" in out.stderr
    verify, plain = map(int, re.search(r"(\d+) verify \+ (\d+) plain steps", out.stderr).groups())
    declined = verify <= (verify + plain) // 4
    assert ("the cost model decoded" in out.stderr) == declined, out.stderr
    out = run_pyspec("demo", "--lookup", "-n", "24")
    assert out.returncode == 0, out.stderr
    assert "with prompt lookup" in out.stderr and "pyspec: drafter:" not in out.stderr
    both = run_pyspec("demo", "--lookup", "--draft-model")
    assert both.returncode == 2 and "not allowed with" in both.stderr


def test_generate_reports_a_missing_model_clearly(tmp_path):
    out = run_pyspec("generate", "-m", str(tmp_path / "missing.gguf"), "-n", "4")
    assert out.returncode == 2
    assert "missing.gguf: no such file" in out.stderr and "Traceback" not in out.stderr
    out = run_pyspec("generate", "-m", str(tmp_path), "-n", "4")  # a directory is named as one
    assert out.returncode == 2
    assert "is a directory; give the path of a .gguf file" in out.stderr


def test_an_incompatible_draft_is_reported_without_a_traceback(qwen_path, gemma_path):
    out = run_pyspec("generate", "-m", qwen_path, "-md", gemma_path, "-n", "4")
    assert out.returncode == 1
    assert "pyspec: error: draft and target differ in vocabulary type: target BPE" in out.stderr
    assert "Traceback" not in out.stderr


def test_unknown_model_name_is_a_clear_error():
    with pytest.raises(KeyError, match="unknown model 'nope'; known: " + ", ".join(MODELS)):
        ensure_model("nope")


def test_assembled_models_have_the_published_size():
    for name, spec in MODELS.items():
        assert ensure_model(name).stat().st_size == spec.size


def test_generate_with_a_json_schema_or_grammar(gemma_path, tmp_path):
    schema = '{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}'
    out = run_pyspec(
        "generate",
        "-m",
        gemma_path,
        "--chat",
        "-n",
        "40",
        "--json-schema",
        schema,
        "-p",
        "Maria lives in Valencia. Answer with JSON giving her city.",
    )
    assert out.returncode == 0, out.stderr
    assert set(json.loads(out.stdout)) == {"city"}
    assert "grammar" in out.stderr  # the statistics say what the grammar cost
    bad = tmp_path / "bad.gbnf"
    bad.write_text("root ::= broken (")
    refused = run_pyspec("generate", "-m", gemma_path, "-n", "4", "--grammar", str(bad), "--plain")
    assert refused.returncode == 2 and "does not parse" in refused.stderr
    assert "Traceback" not in refused.stderr
    missing = run_pyspec("generate", "-m", gemma_path, "--json-schema", str(tmp_path / "none.json"))
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_generate_sampling_choices(gemma_path):
    """--sampling graph samples in llama.cpp's graph and says so; with a grammar it is a usage
    error found before the model loads."""
    out = run_pyspec(
        "generate",
        "-m",
        gemma_path,
        "-n",
        "12",
        "--temp",
        "0",
        "-t",
        "2",
        "--sampling",
        "graph",
        "-p",
        "The sea is",
    )
    assert out.returncode == 0, out.stderr
    assert "sampling graph" in out.stderr
    refused = run_pyspec(
        "generate", "-m", gemma_path, "-n", "4", "--sampling", "graph", "--json", "-p", "Give JSON."
    )
    assert refused.returncode == 2 and "--sampling graph cannot serve" in refused.stderr
    assert "loading" not in refused.stderr  # refused before the model loads
    bad = run_pyspec("generate", "-m", gemma_path, "-n", "4", "--sampling", "gpu")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_generate_calibrates_the_batch_costs_once_per_model_and_setup(gemma_path, tmp_path):
    cache = {"PYSPEC_CACHE": str(tmp_path), "PYSPEC_COST_CACHE": "on"}
    args = ("generate", "-m", gemma_path, "--lookup", "-n", "8", "--temp", "0", "-p", "Hi.")

    # A busy moment of the machine (a suite or a build beside it) makes the measured ratios
    # implausible, and the calibration says so and gives up (calibrate_once): measured again
    # then, as a user would, up to six times, a few seconds apart (each try takes about a
    # second, so three in a row once all fell inside one busy minute of another process).
    def until_calibrated():
        for attempt in range(6):
            out = run_pyspec(*args, "--draft-max", "8", env=cache)
            if "calibration failed" not in out.stderr or attempt == 5:
                break
            time.sleep(5 * (attempt + 1))
        return out

    first = until_calibrated()
    assert first.returncode == 0, first.stderr
    assert "measuring this model's batch costs at every draft length up to 8" in first.stderr
    assert "sweep 3/3 over batch sizes 1-9" in first.stderr and "calibrated" in first.stderr
    record = json.loads(next((tmp_path / "costs").glob("*.json")).read_text())
    assert record["calibrated"] is True and sorted(map(int, record["ratios"]))[:8] == list(
        range(2, 10)
    )
    assert record["statistic"] == "median"  # each size's median pass (calibration.py)
    again = run_pyspec(*args, "--draft-max", "8", env=cache)
    assert again.returncode == 0 and "measuring" not in again.stderr
    # A shape calibrated the old way (each size's fastest pass) is measured again, and said.
    path = next((tmp_path / "costs").glob("*.json"))
    path.write_text(json.dumps({k: v for k, v in record.items() if k != "statistic"}))
    old = until_calibrated()
    assert old.returncode == 0 and "calibrated by each size's fastest pass" in old.stderr
    assert json.loads(path.read_text())["statistic"] == "median"
    skipped = run_pyspec(*args, "--draft-max", "12", "--no-calibrate", env=cache)
    assert skipped.returncode == 0 and "measuring" not in skipped.stderr
    off = run_pyspec(*args, env={"PYSPEC_CACHE": str(tmp_path), "PYSPEC_COST_CACHE": "off"})
    assert off.returncode == 0
    assert "not calibrating the batch costs: the cost cache is off" in off.stderr


@pytest.mark.parametrize(
    "option, value, said",
    [
        ("-n", "-5", "-5 is out of range: at least 1, or -1"),
        ("-n", "abc", "'abc' is not a whole number"),
        ("--top-p", "7", "7 is out of range: in (0, 1]"),
        ("--top-p", "0", "0 is out of range: in (0, 1]"),
        ("--min-p", "-0.1", "-0.1 is out of range: in [0, 1]"),
        ("--temp", "nan", "nan is out of range: a finite number"),
        ("--top-k", "-1", "-1 is out of range: 0 (off) or more"),
        ("--draft-max", "0", "0 is out of range: at least 1 (--no-draft"),
        ("-t", "0", "0 is out of range: at least 1"),
        ("--draft-p-min", "1", "1 is out of range: in [0, 1)"),  # (the library refuses 1)
    ],
)
def test_an_option_out_of_range_is_refused_by_name(tmp_path, option, value, said):
    """Before session 48 these ran silently (-n -5 to the context's end, --top-p 7 as 1),
    where pyspec.SamplingParams refuses the same values; and a usage error printed the
    list of subcommands' usage, not the subcommand's."""
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")  # never loaded: the options are refused first
    out = run_pyspec("generate", "-m", str(model), option, value)
    assert out.returncode == 2, out.stderr
    assert f"pyspec generate: error: argument {option}" in out.stderr, out.stderr  # (-n/--max-...)
    assert said in out.stderr and "Traceback" not in out.stderr
    assert "usage: pyspec generate" in out.stderr


def test_the_limits_an_option_allows_still_run_to_parsing():
    """The edges each range allows parse (nothing loaded: --help after them)."""
    edges = ("-n", "-1", "--top-p", "1", "--min-p", "0", "--temp", "-1", "--top-k", "0")
    out = run_pyspec("generate", "-m", "x.gguf", *edges, "--seed", str(2**64 - 1), "--help")
    assert out.returncode == 0 and "usage: pyspec generate" in out.stdout, out.stderr
