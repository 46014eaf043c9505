"""The one reading of PYSPEC_* switches, and the variables that use it."""

import pytest

from pyspec.llama import huge_pages
from pyspec.llama.drafting import cost_cache
from pyspec.switches import switched_off, switched_on


@pytest.mark.parametrize("value", ["0", "off", "OFF", " no ", "false", "False"])
def test_off_words_turn_a_default_on_switch_off(monkeypatch, value):
    monkeypatch.setenv("PYSPEC_TEST_SWITCH", value)
    assert switched_off("PYSPEC_TEST_SWITCH") and not switched_on("PYSPEC_TEST_SWITCH")


@pytest.mark.parametrize("value", ["1", "on", "Yes", " true "])
def test_on_words_turn_a_default_off_switch_on(monkeypatch, value):
    monkeypatch.setenv("PYSPEC_TEST_SWITCH", value)
    assert switched_on("PYSPEC_TEST_SWITCH") and not switched_off("PYSPEC_TEST_SWITCH")


@pytest.mark.parametrize("value", [None, "", "maybe", "2"])
def test_anything_else_leaves_the_default(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("PYSPEC_TEST_SWITCH", raising=False)
    else:
        monkeypatch.setenv("PYSPEC_TEST_SWITCH", value)
    assert not switched_on("PYSPEC_TEST_SWITCH") and not switched_off("PYSPEC_TEST_SWITCH")


@pytest.mark.parametrize(
    "variable, enabled",
    [
        ("PYSPEC_HUGE_PAGES", huge_pages.enabled_by_env),
        ("PYSPEC_COST_CACHE", cost_cache.cache_enabled),
    ],
)
def test_the_default_on_variables_read_the_same_words(monkeypatch, variable, enabled):
    monkeypatch.setenv(variable, "Off")
    assert not enabled()
    monkeypatch.setenv(variable, "1")
    assert enabled()
