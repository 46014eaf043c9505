"""A fresh machine has pyspec before it has llama-cpp-python: the README's main command runs
``pip install .`` and then ``python3 -m pyspec install-llama``, so the installer, the command
line's parser and the doctor must import without llama_cpp, and the commands that need it
must say how to get it instead of printing a traceback.

Each check runs in a fresh process in which ``import llama_cpp`` fails (``sys.modules``
holds None for it, which is what Python does for a module that must not be imported), so
the installed llama-cpp-python stays out of the way.
"""

import os
import subprocess
import sys
import textwrap

import pytest

BLOCK_LLAMA = "import sys; sys.modules['llama_cpp'] = None\n"


def _run_without_llama(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", BLOCK_LLAMA + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.expanduser("~"),  # the installed package, not the source tree
    )


def test_the_block_really_hides_llama_cpp():
    """The harness itself: without the block llama_cpp may import; with it, it cannot."""
    done = _run_without_llama("import llama_cpp\n")
    assert done.returncode != 0 and "llama_cpp" in done.stderr


def test_the_installer_the_command_line_and_the_doctor_import_without_llama_cpp():
    done = _run_without_llama(
        """
        import pyspec.llama, pyspec.llama.options, pyspec.llama.runtime.amx_fix
        import pyspec.tools.cli, pyspec.tools.install_llama, pyspec.tools.doctor
        print("imported")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "imported"


def test_install_llama_help_runs_without_llama_cpp():
    done = _run_without_llama(
        """
        from pyspec.tools.cli import main
        try:
            main(["install-llama", "--help"])
        except SystemExit as exc:
            raise SystemExit(exc.code)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "install-llama" in done.stdout


@pytest.mark.parametrize(
    "argv",
    [["demo"], ["serve", "-m", "x.gguf"], ["generate", "-m", "x.gguf", "-p", "hi"]],
    ids=["demo", "serve", "generate"],
)
def test_commands_that_need_llama_cpp_say_how_to_install_it(argv):
    done = _run_without_llama(
        f"""
        from pyspec.tools.cli import main
        raise SystemExit(main({argv!r}))
        """
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert "llama-cpp-python is not installed" in done.stderr
    assert "pyspec install-llama" in done.stderr


def test_the_library_raises_a_named_error_without_llama_cpp():
    done = _run_without_llama(
        """
        from pyspec.errors import LlamaNotInstalledError, PyspecRuntimeError
        from pyspec.llama.runtime.guard import check_llama_build
        try:
            check_llama_build()
        except LlamaNotInstalledError as exc:
            assert isinstance(exc, PyspecRuntimeError)
            print("raised:", exc)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("raised: llama-cpp-python is not installed")


def test_public_names_load_on_first_use():
    """pyspec.llama's names are the defining modules' own objects, loaded when first read;
    a name it does not have is an AttributeError, as for any module."""
    import pyspec.llama
    from pyspec.llama.drafting.lookup import PromptLookup
    from pyspec.llama.model import SpeculativeLlama

    assert pyspec.llama.SpeculativeLlama is SpeculativeLlama
    assert pyspec.llama.PromptLookup is PromptLookup
    assert sorted(pyspec.llama.__all__) == sorted(pyspec.llama._PUBLIC)
    assert set(pyspec.llama.__all__) <= set(dir(pyspec.llama))
    with pytest.raises(AttributeError, match="no_such_name"):
        pyspec.llama.no_such_name  # noqa: B018
