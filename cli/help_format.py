"""How qtts's help reads: prose that flows at any width, and Click's spelling of values.

Typer 0.29 (rich) keeps a docstring's line breaks, which rich then wraps again into ragged
lines; it shows a required argument as `{input}`, each value's type as `<str>` or `<int range>`
and every flag as `<bool>`. Every qtts command is built with the classes here (cli/app.py), so:

- help and epilog paragraphs flow: the source's line breaks become spaces. A paragraph that
  starts with "\\b" (Click's mark) is a block kept line by line: the examples, the exit codes.
- values read as in Click: INPUT in the usage line and the arguments panel; TEXT, INTEGER,
  FLOAT, PATH or [a|b] beside an option (an option's own metavar wins); nothing beside a flag.
- an options panel gives its help column the width the names and values leave. Typer lays a
  panel out as six columns (long name, short name, the `--no-` form and its short form, value,
  help) that rich shrinks evenly when they do not fit, so at 80 columns a panel holding a
  `--no-` flag kept ~20 characters for the help. Here a flag's `--no-` form sits under its
  name, and the help column is the table's only flexible one (options_table).
- `qtts --help` lists each command on one line: its `short_help` (cli/app.py), the detail
  being in the command's own help.

Imports typer only: `qtts --help` stays instant.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

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


@functools.cache
def options_table() -> type:
    """rich's Table, for typer's options panels (made lazily: rich loads only for help).

    typer declares no column for an options panel and adds its rows as [required mark,] long
    name, short name, `--no-` long name, `--no-` short name, value, help. Each row is stacked to
    [mark,] names, short names, value, help (a `--no-` form on the line below its flag), and the
    help column gets a ratio: rich then gives the others their natural width and the help all
    the rest. A table whose columns were declared (the commands panel) is left as it is."""
    from rich.table import Table
    from rich.text import Text

    def stacked(first, second):
        """A name and, on the line below, its `--no-` form (when it has one)."""
        if not (second.plain if isinstance(second, Text) else second):
            return first
        return Text("\n").join([Text(first) if isinstance(first, str) else first, second])

    class OptionsTable(Table):
        _stack = False  # an options panel's table: set by its first row

        def add_row(self, *cells, **kwargs) -> None:
            if not self.rows and not self.columns:  # typer declares no column for an options panel
                self._stack = True
            if self._stack and len(cells) in (6, 7):
                *mark, long, short, no_long, no_short, value, help_ = cells
                cells = (*mark, stacked(long, no_long), stacked(short, no_short), value, help_)
            super().add_row(*cells, **kwargs)
            if self._stack and self.columns[-1].ratio is None:
                self.columns[-1].ratio = 1  # the help takes what the other columns leave

    return OptionsTable


@contextmanager
def _stacked_option_panels() -> Iterator[None]:
    """typer's help rendering, with options_table() as its Table while it runs."""
    from typer import rich_utils

    plain = getattr(rich_utils, "Table", None)
    if plain is None:  # a typer that renders otherwise (pinned below 0.30): its own layout
        yield
        return
    rich_utils.Table = options_table()
    try:
        yield
    finally:
        rich_utils.Table = plain


class _ReadsCleanly:
    """Flowing help and epilog, parameters in Click's spelling, panels with a wide help."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.help, self.epilog = flow(self.help), flow(self.epilog)

    def get_params(self, ctx) -> list:
        return in_click_spelling(super().get_params(ctx), ctx)

    def format_help(self, ctx, formatter) -> None:
        with _stacked_option_panels():
            super().format_help(ctx, formatter)


class HelpCommand(_ReadsCleanly, TyperCommand):
    """Each qtts command (app.command(cls=HelpCommand))."""


class HelpGroup(_ReadsCleanly, TyperGroup):
    """The qtts app itself (typer.Typer(cls=HelpGroup))."""
