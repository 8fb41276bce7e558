"""The parsers' options and the response formats are each described once
(``tokenwire.base._options.OPTIONS``, ``tokenwire.read._registry.FORMATS``): everything that
spells them by hand is held to the description here, everything else is derived from it."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import tokenwire
import tokenwire.ray
from tokenwire import _pycore
from tokenwire.auditing import _formats
from tokenwire.base._options import BY_NAME, OPTIONS, ParseOptions, audited, options_of
from tokenwire.cli import commands
from tokenwire.read._registry import FORMATS

from .conftest import _core

ROOT = Path(tokenwire.__file__).parent
DOCS = Path(__file__).parent.parent / "docs"
PEERS = [pytest.param(_pycore, id="python"),
         pytest.param(_core, id="c", marks=pytest.mark.skipif(_core is None, reason="no compiled core"))]


def _stub() -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse((ROOT / "__init__.pyi").read_text("utf-8"))
    return {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


WHOLE = [name for name, entry in FORMATS.items() if entry.reads is None]
STREAMS = [name for name, entry in FORMATS.items() if entry.reads is not None]


@pytest.mark.parametrize("impl", PEERS)
@pytest.mark.parametrize("format", WHOLE)
def test_each_parser_takes_its_options_in_order_with_their_defaults(impl, format):
    parser = getattr(impl, FORMATS[format].parser)
    keywords = [p for p in inspect.signature(parser).parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert [p.name for p in keywords] == options_of(format) == FORMATS[format].options
    for p in keywords:
        assert p.default == BY_NAME[p.name].default, p.name


@pytest.mark.parametrize("format", STREAMS)
def test_a_stream_format_takes_its_whole_body_formats_options(format):
    """A stream format (``parse_many``, the audit, ``--format``) is read by ``parse_*_stream``,
    which the facade exports, with the options of the whole-body format it reassembles into."""
    entry = FORMATS[format]
    assert entry.reads in WHOLE and entry.options == options_of(entry.reads)
    assert callable(getattr(tokenwire, entry.parser)) and entry.parser in _stub()
    assert entry.detect({"choices": []}) is False


@pytest.mark.parametrize("format", WHOLE)
def test_the_stub_spells_each_parser_option_as_described(format):
    node = _stub()[FORMATS[format].parser]
    spelled = [(a.arg, ast.unparse(a.annotation)) for a in node.args.kwonlyargs]
    assert spelled == [(name, BY_NAME[name].annotation) for name in options_of(format)]


def test_the_audited_options_are_every_audit_entry_points():
    """``tokenwire.audit`` and ``tokenwire.ray.check`` take the audited options (their
    signatures say so, and the stub spells them), the report and the command line name them."""
    names = [o.name for o in audited()]
    for function in (tokenwire.audit, tokenwire.ray.check):
        keywords = [p.name for p in inspect.signature(function).parameters.values() if p.kind is p.KEYWORD_ONLY]
        assert keywords[-len(names):] == names
    stub = [a.arg for a in _stub()["audit"].args.kwonlyargs]
    assert stub == ["field", *names]
    assert list(ParseOptions.__dataclass_fields__) == names
    assert list(ParseOptions().report()) == names
    parser = commands._parser()
    check, inspect_ = (parser._subparsers._group_actions[0].choices[c] for c in ("check", "inspect"))
    cli_text = (DOCS / "cli.md").read_text("utf-8")
    for option in audited():
        assert option.reader in commands.READERS and option.help and option.inspect_help
        for sub in (check, inspect_):
            assert option.flag in sub._option_string_actions
        assert option.flag in cli_text, f"docs/cli.md does not document {option.flag}"


def test_an_unknown_option_is_the_type_error_python_gives():
    with pytest.raises(TypeError, match=r"^audit\(\) got an unexpected keyword argument 'topk'$"):
        tokenwire.audit(b"{}", topk=3)
    with pytest.raises(TypeError, match=r"^check\(\) got an unexpected keyword argument 'topk'$"):
        tokenwire.ray.check([], topk=3)


def test_each_format_is_given_the_audited_options_it_takes():
    options = ParseOptions(top_k=2, num_experts=8, routed_experts_shape=(1, 2))
    assert options.for_format("generate") == {"top_k": 2, "num_experts": 8}
    # chat and completions take SGLang's row shape too: NVIDIA Dynamo passes an SGLang worker's routing on.
    assert options.for_format("chat") == {"top_k": 2, "num_experts": 8, "routed_experts_shape": (1, 2)}
    assert options.for_format("completions") == options.for_format("chat")
    assert options.for_format("sglang") == {"top_k": 2, "num_experts": 8, "routed_experts_shape": (1, 2)}
    assert options.report()["routed_experts_shape"] == [1, 2]


def test_every_option_names_registered_formats():
    for option in OPTIONS:
        assert option.formats is None or set(option.formats) <= set(FORMATS), option.name
        assert not option.audited or option.check is not None or option.name == "top_k"


def test_the_formats_are_the_registry_everywhere():
    """The audit's formats, ``parse_many``'s and the command line's ``--format`` are the
    registry's, in its order (the order ``--format auto`` tries them)."""
    assert list(_formats.FORMATS) == list(FORMATS)
    for name, entry in FORMATS.items():
        assert _formats.FORMATS[name].detect is entry.detect
        assert callable(getattr(_pycore if entry.reads is None else tokenwire, entry.parser))
    parser = commands._parser()
    check = parser._subparsers._group_actions[0].choices["check"]
    assert check._option_string_actions["--format"].choices == ["auto", *FORMATS]
    with pytest.raises(ValueError, match="format must be one of 'generate', 'completions', 'chat', 'sglang'"):
        tokenwire.parse_many([b"{}"], format="nope")
    with pytest.raises(TypeError, match=r"unknown option for the sglang parser: payload_root \(it takes "
                       + ", ".join(options_of("sglang")) + r"\)"):
        tokenwire.parse_many([b"{}"], format="sglang", payload_root="/tmp")
