"""A manifest file's physical lines, numbered from 1 as refusals name them (the first without its
UTF-8 byte-order mark), and the refusal of UTF-16 or UTF-32 text, named before a reader misreads
its NUL bytes. Knows bytes; no formats."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from qtts.core.errors import ManifestError

UTF8_BOM = b"\xef\xbb\xbf"
# The UTF-32 marks first: UTF-32LE's begins with UTF-16LE's.
WIDE_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)
HEAD_BYTES = 4096  # what the encoding is judged on


def numbered_lines(f: BinaryIO) -> Iterator[tuple[int, bytes]]:
    for number, line in enumerate(f, start=1):
        yield number, line.removeprefix(UTF8_BOM) if number == 1 else line


def wide_encoding(head: bytes) -> str | None:
    """UTF-16 or UTF-32 by the byte-order mark, or a guess when a quarter of the head is NUL
    bytes: such text without a mark, mostly in Latin or other scripts below U+0100 (Chinese in
    UTF-16 has few NULs and is left to the UTF-8 check); None otherwise."""
    for bom, name in WIDE_BOMS:
        if head.startswith(bom):
            return name
    if len(head) >= 2 and head.count(0) * 4 >= len(head):
        return "UTF-16" if head.count(0) * 4 < len(head) * 3 else "UTF-32"
    return None


def refuse_wide_text(head: bytes, where: str) -> None:
    """A ManifestError naming the encoding, for text in UTF-16 or UTF-32."""
    name = wide_encoding(head[:HEAD_BYTES])
    if name is not None:
        raise ManifestError(
            f"{where} is not UTF-8: it looks like {name} text; qtts reads UTF-8 (convert it, "
            f"for example: iconv -f {name} -t UTF-8 IN > OUT)"
        )


def refuse_wide_file(path: Path, where: str) -> None:
    """refuse_wide_text on a file's head; a file that cannot be opened is its reader's to name."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES)
    except OSError:
        return
    refuse_wide_text(head, where)
