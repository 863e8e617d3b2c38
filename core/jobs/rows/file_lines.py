"""A manifest file's physical lines, numbered from 1 as every refusal names them, the first
without its UTF-8 byte-order mark. Knows bytes; no formats."""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

UTF8_BOM = b"\xef\xbb\xbf"


def numbered_lines(f: BinaryIO) -> Iterator[tuple[int, bytes]]:
    for number, line in enumerate(f, start=1):
        yield number, line.removeprefix(UTF8_BOM) if number == 1 else line
