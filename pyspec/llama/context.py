"""What a llama.cpp context can do for the loop: where its logits are computed, how many
outputs per sequence its graph may sample (and how to ask for more at creation)."""

from __future__ import annotations

import contextlib
import threading

import llama_cpp


def model_output_on_gpu(llama: llama_cpp.Llama) -> bool:
    """Whether llama.cpp computes this model's logits on a GPU: a build that can offload, and
    n_gpu_layers above the layer count (llama.cpp offloads the output layer last)."""
    if not llama_cpp.llama_supports_gpu_offload():
        return False
    n_gpu_layers = int(llama.model_params.n_gpu_layers)
    return n_gpu_layers < 0 or n_gpu_layers > int(llama_cpp.llama_model_n_layer(llama.model))


_CONTEXT_PARAMS_LOCK = threading.Lock()


@contextlib.contextmanager
def context_outputs_per_seq(n: int):
    """Creates llama.cpp contexts (inside this block) that can sample ``n`` outputs per
    sequence in the graph. llama-cpp-python builds its context parameters from
    ``llama_context_default_params()`` (n_outputs_max_per_seq = 1) and has no argument for
    it, so the defaults function is wrapped for the duration of the Llama's construction."""
    if not n:
        yield
        return
    module = llama_cpp.llama_cpp
    with _CONTEXT_PARAMS_LOCK:
        original = module.llama_context_default_params

        def with_outputs():
            params = original()
            params.n_outputs_max_per_seq = n
            return params

        module.llama_context_default_params = with_outputs
        try:
            yield
        finally:
            module.llama_context_default_params = original
