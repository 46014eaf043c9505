"""pyspec serve's settings and command line (no model loaded): llama_cpp.server's options
keep their names, pyspec's defaults make speculation run, mistakes are named."""

import json
import os
import sys

import pytest

pytest.importorskip("fastapi", reason="pyspec serve needs the [server] packages")
pytest.importorskip("pydantic_settings")

from pyspec.llama.drafting.adaptive import DEFAULT_DRAFT_MAX
from pyspec.serve import build_parser, load_settings, main


def _settings(*argv):
    return load_settings(build_parser().parse_args(list(argv)))


def test_short_options_and_defaults(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    server, (settings,) = _settings("-m", str(model), "--draft-max", "8", "--port", "9001")
    assert (settings.model, settings.draft, settings.draft_max) == (str(model), "lookup", 8)
    assert settings.logits_all is False  # logprobs are answered per request without it
    assert settings.flash_attn is True  # as llama.cpp's own server runs
    assert server.interrupt_requests is False and server.port == 9001
    assert settings.n_threads == (os.cpu_count() or 1)  # every CPU, as pyspec generate's -t
    _, (settings,) = _settings("-m", str(model), "-md", str(model), "--draft_p_min", "0.3")
    assert settings.draft == str(model) and settings.draft_p_min == 0.3
    _, (settings,) = _settings("--model", str(model), "--no-draft")
    assert settings.draft == "none"
    _, (settings,) = _settings("--model", str(model), "--flash_attn", "false")
    assert settings.flash_attn is False


def test_the_weights_are_read_in_where_they_go_to_huge_pages_unless_use_mmap_is_set(
    tmp_path, monkeypatch
):
    from pyspec.llama import huge_pages
    from pyspec.serve.app import weights_read_in

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    setting = tmp_path / "enabled"
    monkeypatch.setattr(huge_pages, "THP_SETTING", setting)
    setting.write_text("always [madvise] never\n")
    _, (settings,) = _settings("-m", str(model))
    assert settings.use_mmap is True  # (llama_cpp.server's default, until the load)
    if sys.platform.startswith("linux"):
        assert weights_read_in(settings).use_mmap is False
    _, (chosen,) = _settings("-m", str(model), "--use_mmap", "true")
    assert weights_read_in(chosen).use_mmap is True
    setting.write_text("always madvise [never]\n")
    assert weights_read_in(settings).use_mmap is True
    setting.write_text("[always] madvise never\n")
    monkeypatch.setenv("PYSPEC_HUGE_PAGES", "off")
    assert weights_read_in(settings).use_mmap is True


def test_config_file_with_a_drafter_per_model(tmp_path):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    for p in (a, b):
        p.write_bytes(b"GGUF")
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "port": 9100,
                "models": [
                    {"model": str(a), "model_alias": "coder", "draft": str(b), "draft_max": 6},
                    {"model": str(b), "model_alias": "small", "draft": "lookup", "adaptive": False},
                ],
            }
        )
    )
    server, models = _settings("--config_file", str(config))
    assert server.port == 9100 and server.interrupt_requests is False
    assert [(m.model_alias, m.draft, m.draft_max, m.adaptive) for m in models] == [
        ("coder", str(b), 6, True),
        ("small", "lookup", DEFAULT_DRAFT_MAX, False),  # the default
    ]


@pytest.mark.parametrize(
    "argv, words",
    [
        ([], "give the target model with -m"),
        (["-m", "/no/such/model.gguf"], "no such file"),
        (["-m", "{dir}"], "is a directory"),
        (["-m", "{model}", "--draft_max", "99"], "draft_max"),
        (["-m", "{model}", "--draft_model", "prompt-lookup-decoding"], "use draft='lookup'"),
        (["-m", "{model}", "--draft_model_num_pred_tokens", "4"], "draft length is draft_max"),
        (["--config_file", "/no/such/config.json"], "no such file"),
    ],
)
def test_mistakes_are_named(tmp_path, capsys, argv, words):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    argv = [a.format(dir=tmp_path, model=model) for a in argv]
    assert main(argv) == 2
    assert words in capsys.readouterr().err


def test_a_draft_setting_with_a_comma_is_a_list_of_drafters():
    from pyspec.serve.app import drafter_setting

    assert drafter_setting("lookup") == "lookup"
    assert drafter_setting("lookup, /m/d.gguf") == ["lookup", "/m/d.gguf"]


def test_help_says_llama_cpp_servers_draft_options_are_refused(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--draft_model DRAFT_MODEL not used here" in text
    assert "Method to use for speculative decoding" not in text  # llama_cpp.server's words
