"""The parsers' options, described once.

Each :class:`Option` is one keyword argument of the parsers: its name, its default, the
formats whose parser takes it (None: every format), how the stub spells its type, and one
line saying what it does. The options the audit passes on (``tokenwire.audit``,
``tokenwire.ray.check``, ``tokenwire check`` and ``tokenwire inspect``) also say how the audit
checks a value and how the command line reads one (its flag, metavar, value reader and help).

What is derived from here: the options each format's parser takes, in the parsers' order
(``options_of``: ``parse_many``'s and ``aparse_many``'s check of ``**parser_options``, the
audit's call of each parser); :class:`ParseOptions`, the audit's options, one field per
audited option (the keyword arguments of ``tokenwire.audit`` and ``tokenwire.ray.check``, the
JSON report's entries, the command line's flags). What is held to it by tests
(``tests/test_options.py``): the keyword-only parameters of both peers' parsers and of the
stub's, names, order and defaults; the stub's ``audit`` and the documentation of the flags.

A new option is an entry here, its rule (in ``rules/`` and, for the compiled core, its
parser's signature in ``_core_parsers.pxi``) and its documentation (the stub's docstring,
``docs/``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field, make_dataclass
from typing import Any

from ._args import check_num_experts, check_routed_shape

__all__ = ["OPTIONS", "Option", "ParseOptions", "audited", "check_names", "from_args", "options_of",
           "with_options"]


@dataclass(frozen=True)
class Option:
    name: str
    default: Any
    annotation: str  # the type, as the stub spells it
    doc: str
    formats: tuple[str, ...] | None = None  # the formats whose parser takes it; None: every format
    # The audit's options: the check of a value passed to tokenwire.audit or tokenwire.ray.check
    # (None: passed on as given, the parser checks it), and the command line's flag.
    audited: bool = False
    check: Callable[[Any], Any] | None = None
    metavar: str | None = None
    reader: str | None = None  # the command line's reader of the value (tokenwire.cli.commands.READERS)
    help: str | None = None  # tokenwire check --help
    inspect_help: str | None = None  # tokenwire inspect --help

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def taken_by(self, format: str) -> bool:
        return self.formats is None or format in self.formats


_OPENAI = ("completions", "chat", "sglang")

# In the parsers' order: each format's parser takes its options in this order.
OPTIONS: tuple[Option, ...] = (
    Option("top_k", None, "int | None", "also select and validate each token's top-k head", audited=True,
           metavar="K", reader="positive", help="also select and validate top-K heads",
           inspect_help="also decode top-K heads"),
    Option("require_logprobs", True, "bool", "every choice must carry its sampled-token logprobs"),
    Option("require_sampling_mask", False, "bool", "every choice must carry a sampling mask", ("generate",)),
    Option("prompt_logprob_start", None, "int | None", "the request's prompt_logprob_start (teacher scoring)",
           ("generate",)),
    Option("teacher_logits", False, "bool", "the teacher matrix may hold positive values (a logits mode)",
           ("generate",)),
    Option("payload_root", None, "str | os.PathLike[str] | None",
           "the directory of prime-rl's by-handle payload files", ("generate",)),
    Option("check_usage", True, "bool", "usage.completion_tokens must agree with the completion", _OPENAI),
    Option("num_experts", None, "int | None", "every expert id of the routing must be below it", audited=True,
           check=check_num_experts, metavar="N", reader="experts",
           help="the model's count of MoE experts: an expert id of routed_experts at or above it is a defect",
           inspect_help="the model's count of MoE experts (as for check)"),
    Option("routed_experts_shape", None, "tuple[int, int] | None", "(layers, topk) of SGLang's bare routing rows",
           _OPENAI, audited=True, check=check_routed_shape, metavar="LAYERS,TOPK", reader="shape",
           help="the rows of SGLang's routing (meta_info.routed_experts, sglext.routed_experts, and Dynamo's "
           "from an SGLang worker: a bare int32 string): each row LAYERS x TOPK ids (the other routing forms "
           "carry their shape)",
           inspect_help="the rows of SGLang's routing (as for check)"),
    Option("routed_experts_start_len", 0, "int", "the prompt tokens SGLang's routing rows start after",
           _OPENAI),
    Option("prompt_tokens", None, "int | None", "the prompt's token count, which places the routing and "
           "by-handle rows when the response carries neither prompt_token_ids nor usage.prompt_tokens",
           ("generate",)),
)

BY_NAME: dict[str, Option] = {option.name: option for option in OPTIONS}


def options_of(format: str) -> list[str]:
    """The keyword options of ``format``'s parser, in its signature's order."""
    return [option.name for option in OPTIONS if option.taken_by(format)]


def audited() -> list[Option]:
    """The options the audit passes on, in order."""
    return [option for option in OPTIONS if option.audited]


_AUDITED = {option.name for option in audited()}


def _for_format(self: Any, format: str) -> dict[str, Any]:
    """The keyword arguments ``format``'s parser is given: the audited options it takes (the
    other formats leave out an option theirs does not, so a log of mixed formats is checked
    with one set of options)."""
    return {o.name: getattr(self, o.name) for o in audited() if o.taken_by(format)}


def _report(self: Any) -> dict[str, Any]:
    """The options as the JSON report writes them (a tuple as a list)."""
    return {o.name: list(v) if isinstance(v := getattr(self, o.name), tuple) else v for o in audited()}


def check_names(caller: str, values: dict[str, Any]) -> None:
    """A keyword argument that is no audited option is the TypeError Python raises for an
    unknown keyword (``caller`` takes the options as ``**options``)."""
    for name in values:
        if name not in _AUDITED:
            raise TypeError(f"{caller}() got an unexpected keyword argument {name!r}")


def _checked(cls: type, values: dict[str, Any]) -> Any:
    """The options from a caller's keyword arguments (their names checked), each value checked
    as ``tokenwire.audit`` checks it."""
    return cls(**{o.name: o.check(values[o.name]) if o.check else values[o.name]
                  for o in audited() if o.name in values})


# The parsers' options an audit passes on, whatever the format: one field per audited option.
ParseOptions = make_dataclass(
    "ParseOptions",
    [(o.name, Any, field(default=o.default)) for o in audited()],
    frozen=True,
    namespace={"for_format": _for_format, "report": _report, "checked": classmethod(_checked)},
)
ParseOptions.__module__ = __name__  # where pickle finds it (the workers of tokenwire check)
ParseOptions.__doc__ = (
    "The parsers' options a check passes on, whatever the format (one field per audited option "
    "of ``OPTIONS``: " + ", ".join(o.name for o in audited()) + "); each format's parser is given the "
    "ones it takes (``for_format``)."
)


def from_args(args: Any) -> Any:
    """The options of a parsed command line (each value read and checked by its flag's reader)."""
    return ParseOptions(**{o.name: getattr(args, o.name) for o in audited()})


def with_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` (which takes the audited options as ``**options``) with a signature that
    names them, as keyword-only parameters with their defaults, for ``help()`` and IDEs."""
    signature = inspect.signature(function)
    kept = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    named = [inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default, annotation=o.annotation)
             for o in audited()]
    function.__signature__ = signature.replace(parameters=[*kept, *named])  # type: ignore[attr-defined]
    return function
