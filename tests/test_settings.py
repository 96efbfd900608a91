"""One typed settings object reads every environment switch, with one rule for booleans."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from loopnest.core import settings

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.parametrize("text, expected", [("1", True), ("true", True), ("ON", True), (" yes ", True),
                                            ("", False), ("0", False), ("false", False), ("Off", False),
                                            ("no", False)])
def test_one_boolean_rule_for_every_switch(monkeypatch, text, expected):
    for name in ("LOOPNEST_DEBUG", "LOOPNEST_POISON", "LOOPNEST_AOT_CACHE", "TRITON_INTERPRET"):
        monkeypatch.setenv(name, text)
    s = settings.Settings.from_env()  # current() holds the Triton mode conftest sets per test
    assert (s.debug, s.poison, s.aot_cache, s.triton_interpret) == (expected,) * 4


def test_a_value_that_is_not_a_boolean_is_an_error_naming_the_variable(monkeypatch):
    monkeypatch.setenv("LOOPNEST_DEBUG", "maybe")
    with pytest.raises(ValueError, match="LOOPNEST_DEBUG='maybe' is not a boolean"):
        settings.Settings.from_env()


def test_scope_overrides_only_what_it_names(monkeypatch):
    with settings.scope(debug=True):
        monkeypatch.setenv("CXX", "clang++")
        assert settings.current().debug and settings.current().cxx == "clang++"
    with pytest.raises(TypeError):
        with settings.scope(no_such_field=1):
            pass


def test_readme_lists_every_variable():
    table = dict(re.findall(r"^\| `([A-Z_]+)` \| (.+?) \|$", README.read_text(), re.M))
    assert table == {name: doc for name, (_, doc) in settings.VARIABLES.items()}
    assert {field for field, _ in settings.VARIABLES.values()} == set(settings.Settings.__dataclass_fields__)


def test_settings_db_and_cli_parser_load_without_torch():
    code = ("import sys, loopnest.core.settings, loopnest.db.api, loopnest.autotune.options, loopnest.cli; "
            "loopnest.cli.build_parser(); "
            "print(sorted(m for m in ('torch', 'triton', 'optuna') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr[-2000:]
