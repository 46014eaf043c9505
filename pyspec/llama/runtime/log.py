"""llama.cpp's log lines, silent unless asked for.

llama-cpp-python 0.3.36 routes llama.cpp's log through a table written for an older ggml
level enum (NONE, INFO, WARN, ERROR, DEBUG, CONT); the ggml it vendors numbers them NONE,
DEBUG, INFO, WARN, ERROR, CONT. So every warning is taken for an error and printed with
``verbose=False`` ("llama_kv_cache_iswa: using full-size SWA cache ..." on every Gemma
context). ``quiet_llama_logs`` installs a callback that reads ggml's own numbering: with
verbose everything is printed, without it only errors.
"""

from __future__ import annotations

import ctypes
import sys

# ggml.h (vendored by llama-cpp-python 0.3.36): enum ggml_log_level
GGML_LOG_LEVEL_DEBUG, GGML_LOG_LEVEL_INFO, GGML_LOG_LEVEL_WARN = 1, 2, 3
GGML_LOG_LEVEL_ERROR, GGML_LOG_LEVEL_CONT = 4, 5

_state = {"verbose": False, "last": GGML_LOG_LEVEL_INFO, "callback": None}


def _print_line(level: int, text: bytes, user_data) -> None:
    if level == GGML_LOG_LEVEL_CONT:  # continues the previous line, at its level
        level = _state["last"]
    else:
        _state["last"] = level
    if _state["verbose"] or level == GGML_LOG_LEVEL_ERROR:
        sys.stderr.write(text.decode("utf-8", errors="replace"))
        sys.stderr.flush()


def quiet_llama_logs(verbose: bool = False) -> None:
    """llama.cpp's log: everything with verbose, otherwise errors only (process-wide)."""
    import llama_cpp

    _state["verbose"] = bool(verbose)
    if _state["callback"] is None:
        # Kept referenced: llama.cpp calls it for as long as the process lives.
        _state["callback"] = llama_cpp.llama_log_callback(_print_line)
        llama_cpp.llama_log_set(_state["callback"], ctypes.c_void_p(0))
