"""The `qtts` logger every command writes to: one line per record on stderr, above any bar."""

from __future__ import annotations

import logging
import sys

from qtts.cli.progress import BarAwareHandler


def setup_logging(quiet: bool, verbose: bool) -> None:
    logger = logging.getLogger("qtts")
    logger.setLevel(logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO)
    for h in [h for h in logger.handlers if getattr(h, "_qtts", False)]:
        logger.removeHandler(h)  # a fresh handler on today's sys.stderr (tests swap it)
    handler = BarAwareHandler(sys.stderr)  # log lines print above a progress bar
    handler.setFormatter(
        logging.Formatter("%(asctime)s qtts %(levelname)s: %(message)s", "%Y-%m-%d %H:%M:%S")
    )
    handler._qtts = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.propagate = False
