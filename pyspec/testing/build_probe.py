"""Logits and batch costs of a llama-cpp-python build, measured in a process of its own.

Two builds of llama-cpp-python cannot live in one process, so comparisons between them
(the AMX build against the non-AMX one: tests/test_llama_amx.py, benchmarks/
bench_llama_builds.py) run this module in a subprocess whose ``PYTHONPATH`` puts the other
build's unpacked wheel first (``unpack_wheel``). pyspec itself comes from wherever the
parent's comes from.

Subcommands (each prints one JSON object on stdout):

- ``rows``: the logits of every position of a text's tokens, decoded one token per
  ``llama_decode`` and again in one batch; written to ``--out`` (``.npz``: ``single``,
  ``batched``).
- ``costs``: milliseconds per ``llama_decode`` of n tokens (median of ``--reps``, every row's
  logits kept, as a verify pass keeps them) for each n in ``--sizes``, and of one-token
  decodes at growing positions (plain decoding).
- ``threads``: the model evaluated with 1, 2 and 2 x cores threads, in turn and in that
  order, in one process: a change of the OpenMP team between calls must not crash the AMX
  path, and the rows must agree.

``--no-extra-bufts`` loads the weights without ggml's extra buffer types (no AMX, no
repacking): ``pyspec.llama.weight_buffers``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Optional

import numpy as np


def unpack_wheel(wheel: Path, dest: Path) -> Path:
    """A wheel's files under dest (a wheel is a zip of the installed tree), for PYTHONPATH."""
    dest = Path(dest)
    marker = dest / ".unpacked-from"
    if marker.is_file() and marker.read_text() == str(wheel):
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            archive.extract(member, dest)
            mode = member.external_attr >> 16
            if mode:
                os.chmod(dest / member.filename, mode & 0o777)
    marker.write_text(str(wheel))
    return dest


def run(args: list, build_dir: Optional[Path] = None, timeout: float = 1800) -> dict:
    """Runs this module with ``args``, with ``build_dir``'s llama_cpp first on the path when
    given; returns its JSON. A failure (a crash included) raises with its output."""
    env = dict(os.environ)
    if build_dir is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(build_dir), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-m", "pyspec.testing.build_probe", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"build probe {' '.join(map(str, args))} exited with "
            f"{proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _load(model: str, n_threads: int, extra_bufts: bool, n_batch: int = 512):
    import llama_cpp

    from pyspec.llama.weight_buffers import model_params

    with model_params(use_extra_bufts=extra_bufts):
        return llama_cpp.Llama(
            model_path=model,
            n_ctx=1024,
            n_batch=n_batch,
            n_ubatch=n_batch,
            n_threads=n_threads,
            n_threads_batch=n_threads,
            logits_all=True,
            verbose=False,
        )


def _decoder(llama):
    from pyspec.llama.batch_decoder import BatchDecoder

    return BatchDecoder(llama.ctx, llama.n_vocab(), llama.n_batch)


def _rows(decoder, tokens: list, at_once: bool) -> np.ndarray:
    n_vocab = decoder.n_vocab
    decoder.remove_from(0)
    if at_once:
        address = decoder.decode(tokens, 0, len(tokens))
        return _copy(address, len(tokens) * n_vocab).reshape(len(tokens), n_vocab)
    out = np.empty((len(tokens), n_vocab), dtype=np.float32)
    for i, tok in enumerate(tokens):
        out[i] = _copy(decoder.decode([tok], i, 1), n_vocab)
    return out


def _copy(address: int, n: int) -> np.ndarray:
    import ctypes

    return np.array(np.ctypeslib.as_array((ctypes.c_float * n).from_address(address)), copy=True)


def _system_info() -> str:
    import llama_cpp

    info = llama_cpp.llama_print_system_info()
    return info.decode(errors="replace") if isinstance(info, bytes) else str(info)


def cmd_rows(a) -> dict:
    llama = _load(a.model, a.threads, not a.no_extra_bufts)
    decoder = _decoder(llama)
    tokens = llama.tokenize(a.text.encode())
    single = _rows(decoder, tokens, at_once=False)
    batched = _rows(decoder, tokens, at_once=True)
    np.savez(a.out, single=single, batched=batched)
    return {"system_info": _system_info(), "n": len(tokens)}


def cmd_costs(a) -> dict:
    llama = _load(a.model, a.threads, not a.no_extra_bufts)
    decoder = _decoder(llama)
    prompt = llama.tokenize("def fibonacci(n):\n    # the n-th Fibonacci number\n".encode())
    prompt = (prompt * 8)[:64]
    sizes = [int(s) for s in a.sizes.split(",")]
    samples = {n: [] for n in sizes}
    plain = []
    for _ in range(a.reps):
        for n in sizes:  # interleaved sizes: a slow moment of the machine hits all of them
            decoder.remove_from(0)
            decoder.decode(prompt, 0, 1)
            t0 = time.perf_counter()
            decoder.decode(prompt[:n] if n <= len(prompt) else (prompt * n)[:n], len(prompt), n)
            samples[n].append(time.perf_counter() - t0)
        decoder.remove_from(0)
        decoder.decode(prompt, 0, 1)
        t0 = time.perf_counter()
        for i in range(a.plain_tokens):
            decoder.decode([prompt[i % len(prompt)]], len(prompt) + i, 1)
        plain.append((time.perf_counter() - t0) / a.plain_tokens)
    return {
        "system_info": _system_info(),
        "ms_per_batch": {str(n): 1000 * float(np.median(v)) for n, v in samples.items()},
        "plain_ms_per_token": 1000 * float(np.median(plain)),
    }


def cmd_threads(a) -> dict:
    tokens = None
    cores = os.cpu_count() or 2
    results = {}
    reference = None
    # The OpenMP team grows past the cores, then shrinks again.
    for label, n_threads in (("1", 1), ("2", 2), (str(2 * cores), 2 * cores), ("1 again", 1)):
        llama = _load(a.model, n_threads, not a.no_extra_bufts)
        tokens = tokens or llama.tokenize(a.text.encode())
        rows = _rows(_decoder(llama), tokens, at_once=True)
        llama.close()
        if reference is None:
            reference = rows
        results[label] = float(np.max(np.abs(rows - reference)))
    return {"system_info": _system_info(), "largest_difference_by_threads": results}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyspec.testing.build_probe")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("rows", "costs", "threads"):
        p = sub.add_parser(name)
        p.add_argument("--model", required=True)
        p.add_argument("--threads", type=int, default=min(os.cpu_count() or 1, 4))
        p.add_argument("--no-extra-bufts", action="store_true")
        if name in ("rows", "threads"):
            p.add_argument("--text", required=True, help="the text whose tokens are evaluated")
        if name == "rows":
            p.add_argument("--out", required=True)
        if name == "costs":
            p.add_argument("--sizes", default="1,2,3,5,9,17")
            p.add_argument("--reps", type=int, default=5)
            p.add_argument("--plain-tokens", type=int, default=16)
    a = parser.parse_args(argv)
    result = {"rows": cmd_rows, "costs": cmd_costs, "threads": cmd_threads}[a.command](a)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
