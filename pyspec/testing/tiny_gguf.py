"""A tiny llama-architecture GGUF with random weights and a real vocabulary size.

For mechanics where the weights do not matter but the vocabulary width does: the in-graph
sampler on a device machine, which has no network to fetch the real models and takes at
most 64 MiB of carried files (benchmarks/device/graph_prebuild.sh). Its logits rows are
n_vocab floats wide like a real model's, with a spread like a real model's (std ~2.5); the
text it writes is noise. Never the only evidence for anything a real model can show.

    python -m pyspec.testing.tiny_gguf OUT.gguf [--vocab 151936] [--seed 0]

Needs the ``gguf`` package (``pip install gguf``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

N_EMBD = 64
N_LAYERS = 2
N_HEADS = 4
N_FF = 128
N_CTX = 2048
N_SPECIAL = 3  # <unk>, <s>, </s>
N_BYTES = 256  # <0x00> ... <0xFF>: the tokenizer's byte fallback
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_BYTE = 1, 2, 3, 6


def write_tiny_llama(path, n_vocab: int = 151936, seed: int = 0) -> Path:
    """Writes the model to ``path`` and returns it. Deterministic for (n_vocab, seed)."""
    import gguf

    if n_vocab < N_SPECIAL + N_BYTES + 1:
        raise ValueError(f"n_vocab must be at least {N_SPECIAL + N_BYTES + 1}, got {n_vocab}")
    rng = np.random.default_rng(seed)
    path = Path(path)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(f"pyspec tiny llama V{n_vocab}")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYERS)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEADS)
    w.add_head_count_kv(N_HEADS)
    w.add_rope_dimension_count(N_EMBD // N_HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(N_BYTES)]
    tokens += [f"\u2581t{i}" for i in range(n_vocab - len(tokens))]
    types = [TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_CONTROL] + [TOKEN_BYTE] * N_BYTES
    types += [TOKEN_NORMAL] * (n_vocab - len(types))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([-float(i) for i in range(n_vocab)])
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)

    def matrix(rows: int, cols: int, scale: float) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float16)

    # logit = rms-normed hidden (~1 per component) . embedding row: std sqrt(64) * 0.3 ~ 2.4
    w.add_tensor("token_embd.weight", matrix(n_vocab, N_EMBD, 0.3))
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    for i in range(N_LAYERS):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(f"blk.{i}.{name}.weight", matrix(N_EMBD, N_EMBD, 0.1))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", matrix(N_FF, N_EMBD, 0.1))
        w.add_tensor(f"blk.{i}.ffn_up.weight", matrix(N_FF, N_EMBD, 0.1))
        w.add_tensor(f"blk.{i}.ffn_down.weight", matrix(N_EMBD, N_FF, 0.1))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the .gguf file to write")
    parser.add_argument(
        "--vocab", type=int, default=151936, help="vocabulary size (Qwen's by default)"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    path = write_tiny_llama(args.out, args.vocab, args.seed)
    print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB, vocabulary {args.vocab})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
