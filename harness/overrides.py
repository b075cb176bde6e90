"""`key=value` command lines, one style for every entry point (as Hydra's overrides read).

`split` turns the words into a mapping; `options` types them like a dict of defaults (the
`figure=` and `nightly` commands); `parse` reads them with an argparse parser's declared options,
so a tool keeps argparse's types, defaults and checks while its users write `max_tokens=2048
quick=true` (the old `--max-tokens 2048 --quick` still works, with a note that it is the old
spelling). `exits_2` is every entry point's bad input: one line on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Mapping

from common.errors import HarnessError
from harness.typed import did_you_mean


def refuse(e: HarnessError) -> int:
    """Bad input told as one line on stderr, `error: ...`; returns the exit status to end with, 2."""
    print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
    return 2


def exits_2(main: Callable[..., int]) -> Callable[..., int]:
    """`main` with a HarnessError (bad input) refused: one line and exit status 2."""
    @functools.wraps(main)
    def guarded(*args, **kwargs) -> int:
        try:
            return main(*args, **kwargs)
        except HarnessError as e:
            return refuse(e)
    return guarded


def split(argv: list[str]) -> dict[str, str]:
    """KEY=VALUE words -> {KEY: VALUE} (a word without '=' is an error naming it)."""
    args = {}
    for a in argv:
        key, sep, value = a.partition("=")
        if not sep or not key:
            raise HarnessError(f"expected KEY=VALUE, got {a!r}")
        args[key] = value
    return args


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def boolean(key: str, value: str) -> bool:
    """true/false (1/0, yes/no, on/off); anything else is an error, never a silent False."""
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise HarnessError(f"{key} must be true or false, got {value!r}")


def options(argv: list[str], defaults: Mapping) -> dict:
    """KEY=VALUE options, each typed like its default; an unknown key suggests the closest."""
    out = dict(defaults)
    for key, value in split(argv).items():
        if key not in defaults:
            raise HarnessError(f"unknown option {key}={value}{did_you_mean(key, defaults)}; "
                               f"known: {', '.join(f'{k}=' for k in defaults)}")
        kind = type(defaults[key])
        try:
            out[key] = boolean(key, value) if kind is bool else kind(value)
        except ValueError:
            raise HarnessError(f"{key} must be a {kind.__name__}, got {value!r}") from None
    return out


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """`key=value` words through `parser`: `key` is an option's name (`max_tokens` for
    `--max-tokens`) or a positional's; booleans take true/false. `-h` prints the key=value help."""
    if any(a in ("-h", "--help") for a in argv):
        print(usage(parser))
        raise SystemExit(0)
    by_key, positionals = {}, []
    for action in parser._actions:
        if action.option_strings:
            long = max(action.option_strings, key=len)
            by_key[long.lstrip("-").replace("-", "_")] = (action, long)
        elif action.dest != "help":
            positionals.append(action)
            by_key[action.dest] = (action, None)
    words, pos, old, bare = [], {}, [], False
    for a in argv:
        key, sep, value = a.partition("=")
        if a.startswith("-") or not sep:  # the old spelling: --flag [value], a bare positional
            old.append(a)
            words.append(a)
            bare = bare or not a.startswith("-")
            continue
        key = key.replace("-", "_")
        if key not in by_key:
            known = sorted(k for k in by_key if k != "help")
            raise HarnessError(f"unknown option {a!r}{did_you_mean(key, known)}; known: {', '.join(f'{k}=' for k in known)}")
        action, flag = by_key[key]
        if flag is None:
            pos[key] = value
        elif isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            if boolean(key, value) == isinstance(action, argparse._StoreTrueAction):
                words.append(flag)
        else:
            words.append(f"{flag}={value}")  # one word: a value may start with '-'
    if pos and bare:
        raise HarnessError(f"name every positional ({', '.join(f'{k}=' for k in pos)}...) or none: "
                           "a mix of key=value and bare words is ambiguous")
    flags = [w for w in old if w.startswith("--")]
    if flags:
        print(f"note: {' '.join(flags)}: the old spelling; write key=value "
              f"(e.g. {flags[0].lstrip('-').replace('-', '_')}=...)", file=sys.stderr)
    named = [pos[a.dest] for a in positionals if a.dest in pos]  # in declaration order, as argparse expects
    return parser.parse_args([*words, "--", *named] if named else words)


def usage(parser: argparse.ArgumentParser) -> str:
    lines = [f"usage: {parser.prog} [key=value ...]", "", (parser.description or "").strip(), ""]
    for action in parser._actions:
        if action.dest == "help":
            continue
        key = max(action.option_strings, key=len).lstrip("-").replace("-", "_") if action.option_strings else action.dest
        default = "" if action.default in (None, argparse.SUPPRESS) else f" (default {action.default})"
        kind = "true|false" if isinstance(action, argparse._StoreTrueAction) else "VALUE"
        lines.append(f"  {key}={kind}{default}  {action.help or ''}".rstrip())
    return "\n".join(lines)
