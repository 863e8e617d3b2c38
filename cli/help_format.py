"""How qtts's help reads: prose that flows at any width, and Click's spelling of values.

Typer 0.29 (rich) keeps a docstring's line breaks, which rich then wraps again into ragged
lines; it shows a required argument as `{input}`, each value's type as `<str>` or `<int range>`
and every flag as `<bool>`. Every qtts command is built with the classes here (cli/app.py), so:

- help and epilog paragraphs flow: the source's line breaks become spaces. A paragraph that
  starts with "\\b" (Click's mark) is a block kept line by line: the examples, the exit codes.
- values read as in Click: INPUT in the usage line and the arguments panel; TEXT, INTEGER,
  FLOAT, PATH or [a|b] beside an option (an option's own metavar wins); nothing beside a flag.

Imports typer only: `qtts --help` stays instant.
"""

from __future__ import annotations

from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

KEEP_LINES = "\b"
CLICK_TYPE_NAMES = {"str": "TEXT", "int": "INTEGER", "float": "FLOAT", "path": "PATH"}


def flow(text: str | None) -> str | None:
    """Each paragraph on one line, for rich to wrap; "\\b" paragraphs as written, unmarked."""
    if not text:
        return text
    paragraphs = text.strip("\n").split("\n\n")
    return "\n\n".join(
        p.removeprefix(KEEP_LINES).strip("\n") if p.startswith(KEEP_LINES) else " ".join(p.split())
        for p in paragraphs
    )


class ClickArgument(TyperArgument):
    """An argument as Click shows it: its metavar (INPUT) alone, `[INPUT]` when optional."""

    def display_type_rich(self, ctx) -> str | None:
        return None  # the help says what it is; typer would add <str>

    def get_usage_pieces(self, ctx) -> list[str]:
        name = self.metavar or self.name.upper()
        name = name if self.required else f"[{name}]"
        return [name if self.nargs == 1 else f"{name}..."]


def click_metavar(option: TyperOption, ctx) -> str:
    """Nothing for a flag; else TEXT, INTEGER, FLOAT, PATH, or [a|b|c] for choices."""
    if option.is_flag and not option.count:
        return ""
    label = option.display_type(ctx).strip("<>")  # "str", "int range", "wav|flac"
    if "|" in label:
        return f"[{label}]"
    base = label.split()[0]
    return CLICK_TYPE_NAMES.get(base, base.upper())


def in_click_spelling(params: list, ctx) -> list:
    """params, each shown as Click would (set once; an explicit metavar is kept)."""
    for param in params:
        if type(param) is TyperArgument:
            param.__class__ = ClickArgument  # the same object: only how it is shown changes
            param.metavar = param.metavar or param.name.upper()
        elif isinstance(param, TyperOption) and param.metavar is None:
            if hasattr(param, "display_type"):  # an older typer spells them so already
                param.metavar = click_metavar(param, ctx)
    return params


class _ReadsCleanly:
    """Flowing help and epilog, parameters in Click's spelling."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.help, self.epilog = flow(self.help), flow(self.epilog)

    def get_params(self, ctx) -> list:
        return in_click_spelling(super().get_params(ctx), ctx)


class HelpCommand(_ReadsCleanly, TyperCommand):
    """Each qtts command (app.command(cls=HelpCommand))."""


class HelpGroup(_ReadsCleanly, TyperGroup):
    """The qtts app itself (typer.Typer(cls=HelpGroup))."""
