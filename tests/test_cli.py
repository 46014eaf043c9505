"""The command line, end to end on a real model."""
import os
import re
import subprocess
import sys

import pytest

from pyspec.models import MODELS, ensure_model

pytestmark = pytest.mark.model


def _run(*args):
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-m", "pyspec", *args], capture_output=True,
                          text=True, timeout=300, cwd=os.path.expanduser("~"), env=env)


def test_generate_streams_text_and_prints_statistics(qwen_path):
    out = _run("generate", "-m", qwen_path, "--lookup", "-n", "24", "--temp", "0",
               "-p", "<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()  # the generated text
    assert "drafted" in out.stderr and "tokens per target step" in out.stderr
    assert "tok/s" in out.stderr


def test_demo_runs_the_default_pair_and_explains_a_declined_draft_model():
    # The default pair on a small machine: the 0.5B draft costs about half the 1.5B target per
    # token, so the cost model mostly decodes plainly, and the demo says why.
    out = _run("demo", "-n", "24")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() and "drafted" in out.stderr
    verify, plain = map(int, re.search(r"(\d+) verify \+ (\d+) plain steps", out.stderr).groups())
    declined = verify <= (verify + plain) // 4
    assert ("the cost model decoded" in out.stderr) == declined, out.stderr
    if declined:
        assert "--lookup drafts from the prompt" in out.stderr
    out = _run("demo", "--lookup", "-n", "24")
    assert out.returncode == 0, out.stderr
    assert "with prompt lookup" in out.stderr and "the cost model decoded" not in out.stderr


def test_generate_reports_a_missing_model_clearly(tmp_path):
    out = _run("generate", "-m", str(tmp_path / "missing.gguf"), "-n", "4")
    assert out.returncode == 2
    assert "missing.gguf: no such file" in out.stderr and "Traceback" not in out.stderr
    out = _run("generate", "-m", str(tmp_path), "-n", "4")  # a directory is named as one
    assert out.returncode == 2
    assert "is a directory; give the path of a .gguf file" in out.stderr


def test_an_incompatible_draft_is_reported_without_a_traceback(qwen_path, gemma_path):
    out = _run("generate", "-m", qwen_path, "-md", gemma_path, "-n", "4")
    assert out.returncode == 1
    assert "pyspec: error: draft and target differ in vocabulary type: target BPE" in out.stderr
    assert "Traceback" not in out.stderr


def test_unknown_model_name_is_a_clear_error():
    with pytest.raises(KeyError, match="unknown model 'nope'; known: " + ", ".join(MODELS)):
        ensure_model("nope")


def test_assembled_models_have_the_published_size():
    for name, spec in MODELS.items():
        assert ensure_model(name).stat().st_size == spec.size
