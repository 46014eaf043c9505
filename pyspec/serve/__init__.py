"""``pyspec serve``: llama-cpp-python's OpenAI-compatible server, decoding speculatively.

    pyspec serve -m target.gguf [-md draft.gguf | --lookup] [--draft-max 64] [--port 8000]

Every option of ``python -m llama_cpp.server`` works as there (``--n_ctx``, ``--chat_format``,
``--api_key``, ``--config_file`` ...), with per-model ``draft``, ``draft_max``, ``draft_min``,
``draft_p_min``, ``adaptive``, ``reproducible`` and ``memory`` settings added (also as
config-file keys). Needs the server's packages: ``pip install 'pyspec[server]'``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from pyspec.errors import InvalidInputError

SERVER_PACKAGES = ("uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")


def _check_server_packages() -> None:
    import importlib.util

    missing = [name for name in SERVER_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise SystemExit(
            f"pyspec serve: error: the server needs {', '.join(missing)}: "
            "pip install 'pyspec[server]' (llama-cpp-python's [server] packages)"
        )


def build_parser() -> argparse.ArgumentParser:
    from llama_cpp.server.cli import add_args_from_model

    from pyspec.serve.settings import SpeculativeSettings

    parser = argparse.ArgumentParser(
        prog="pyspec serve",
        description="llama-cpp-python's OpenAI-compatible server with pyspec's speculative "
        "decoding. Every llama_cpp.server option is accepted as there.",
    )
    friendly = parser.add_argument_group("common options (short forms)")
    friendly.add_argument("-m", dest="model", help="the target GGUF model")
    src = friendly.add_mutually_exclusive_group()
    src.add_argument(
        "-md", "--model-draft", dest="draft", help="a draft GGUF model with the target's tokenizer"
    )
    src.add_argument(
        "--lookup",
        dest="draft",
        action="store_const",
        const="lookup",
        help="n-gram lookup in the prompt and output (the default)",
    )
    src.add_argument(
        "--no-draft",
        dest="draft",
        action="store_const",
        const="none",
        help="no drafts: plain decoding through pyspec's loop (for comparisons)",
    )
    friendly.add_argument("--draft-max", dest="draft_max", type=int)
    friendly.add_argument("--draft-min", dest="draft_min", type=int)
    friendly.add_argument("-c", "--ctx-size", dest="n_ctx", type=int)
    friendly.add_argument("-t", "--threads", dest="n_threads", type=int)
    add_args_from_model(parser.add_argument_group("llama_cpp.server options"), SpeculativeSettings)
    _mark_refused_options(parser)
    parser.add_argument(
        "--config_file",
        "--config",
        dest="config_file",
        help="a JSON or YAML config file (llama_cpp.server's format; each model "
        "may set draft, draft_max, draft_min, draft_p_min, adaptive, reproducible, memory)",
    )
    return parser


# llama_cpp.server options that pyspec serve refuses (settings.py says why), with what to use.
REFUSED_OPTIONS = {
    "draft_model": "not used here (llama-cpp-python's own prompt-lookup loop; it is refused): "
    "pyspec's drafts are --lookup (the default) or -md DRAFT.gguf",
    "draft_model_num_pred_tokens": "not used here (belongs to --draft_model; a value other "
    "than its default is refused): pyspec's draft length is --draft-max",
}


def _mark_refused_options(parser: argparse.ArgumentParser) -> None:
    """Rewrites the help of the llama_cpp.server options pyspec serve refuses, so that --help
    does not offer them with llama_cpp.server's description."""
    for action in parser._actions:
        if action.dest in REFUSED_OPTIONS:
            action.help = REFUSED_OPTIONS[action.dest]


def load_settings(args):
    """(server settings, [model settings]) from the config file or the command line."""
    from llama_cpp.server.cli import parse_model_from_args

    from pyspec.serve.settings import (
        SpeculativeConfigFileSettings,
        SpeculativeModelSettings,
        SpeculativeServerSettings,
    )

    config_file = os.environ.get("CONFIG_FILE", args.config_file)
    if config_file:
        if not os.path.isfile(config_file):
            raise InvalidInputError(f"config file {config_file}: no such file")
        with open(config_file, "rb") as f:
            if config_file.endswith((".yaml", ".yml")):
                import yaml

                data = yaml.safe_load(f)
            else:
                data = json.load(f)
        config = SpeculativeConfigFileSettings.model_validate(data)
        if not config.models:
            raise InvalidInputError(f"config file {config_file}: no models")
        return SpeculativeServerSettings.model_validate(
            config.model_dump(exclude={"models"})
        ), config.models
    if not args.model:
        raise InvalidInputError("give the target model with -m MODEL.gguf (or a --config_file)")
    for flag, path in (
        ("-m", args.model),
        ("-md", args.draft if args.draft not in (None, "lookup", "none") else None),
    ):
        if path is not None and not os.path.isfile(path):
            raise InvalidInputError(
                f"{flag} {path}: "
                + (
                    "is a directory; give the path of a .gguf file"
                    if os.path.isdir(path)
                    else "no such file"
                )
            )
    return (
        parse_model_from_args(SpeculativeServerSettings, args),
        [parse_model_from_args(SpeculativeModelSettings, args)],
    )


def main(argv=None) -> int:
    _check_server_packages()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        server_settings, model_settings = load_settings(args)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        print(f"pyspec serve: error: {exc}", file=sys.stderr)
        return 2
    import uvicorn

    from pyspec.llama.runtime.guard import UnsafeLlamaBuildError
    from pyspec.serve.app import create_app

    try:
        app = create_app(server_settings, model_settings)
    except (UnsafeLlamaBuildError, ValueError) as exc:
        print(f"pyspec serve: error: {exc}", file=sys.stderr)
        return 1
    uvicorn.run(
        app,
        host=os.getenv("HOST", server_settings.host),
        port=int(os.getenv("PORT", server_settings.port)),
        ssl_keyfile=server_settings.ssl_keyfile,
        ssl_certfile=server_settings.ssl_certfile,
    )
    return 0
