"""One command-line style: key=value words read through an argparse parser's declared options."""
from __future__ import annotations

import argparse

import pytest

from common.errors import HarnessError
from harness.overrides import options, parse, split


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tool")
    p.add_argument("src")
    p.add_argument("dst", nargs="?", default="out")
    p.add_argument("--max-tokens", type=int, default=4096, help="largest batch")
    p.add_argument("--quick", action="store_true")
    return p


def test_key_value_reads_options_positionals_and_booleans():
    a = parse(parser(), ["max_tokens=512", "src=a", "quick=true", "dst=b"])
    assert (a.src, a.dst, a.max_tokens, a.quick) == ("a", "b", 512, True)
    a = parse(parser(), ["src=a", "quick=false"])
    assert (a.dst, a.max_tokens, a.quick) == ("out", 4096, False)


def test_old_spelling_still_works_with_a_note(capsys):
    a = parse(parser(), ["a", "--max-tokens", "256", "--quick"])
    assert (a.src, a.max_tokens, a.quick) == ("a", 256, True)
    assert "the old spelling" in capsys.readouterr().err


def test_unknown_key_suggests_the_closest():
    with pytest.raises(HarnessError, match="did you mean 'max_tokens'"):
        parse(parser(), ["src=a", "max_token=3"])


def test_options_type_like_defaults():
    assert options(["n=3", "on=yes", "name=x"], {"n": 1, "on": False, "name": ""}) == {"n": 3, "on": True, "name": "x"}
    with pytest.raises(HarnessError, match="n must be a int"):
        options(["n=three"], {"n": 1})
    with pytest.raises(HarnessError, match="did you mean 'n_jobs'"):
        options(["n_job=3"], {"n_jobs": 2})
    with pytest.raises(HarnessError, match="expected KEY=VALUE"):
        split(["novalue"])


def test_values_may_start_with_a_dash_and_booleans_are_strict():
    a = parse(parser(), ["src=-odd", "max_tokens=-3"])
    assert (a.src, a.max_tokens) == ("-odd", -3)
    with pytest.raises(HarnessError, match="quick must be true or false"):
        parse(parser(), ["src=a", "quick=ture"])
    with pytest.raises(HarnessError, match="on must be true or false"):
        options(["on=ture"], {"on": False})


def test_a_mix_of_named_and_bare_positionals_is_refused():
    with pytest.raises(HarnessError, match="ambiguous"):
        parse(parser(), ["dst=b", "a"])
