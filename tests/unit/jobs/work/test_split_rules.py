"""The segment limit a job runs with: a given one is checked against the model's frame budget
(refused when a segment that long cannot be spoken), the default is fitted to it, saying so."""

from __future__ import annotations

import logging

import pytest

from qtts.core.errors import UsageError
from qtts.core.jobs.contract.spec import SplitOptions
from qtts.core.jobs.work.budget import FrameBudget
from qtts.core.jobs.work.split_rules import settle_segment_limit


def test_the_default_is_kept_where_the_model_speaks_it(caplog):
    with caplog.at_level(logging.INFO, logger="qtts"):
        settled = settle_segment_limit(SplitOptions(), FrameBudget(8192))
    assert settled.max_segment_tokens == settled.limit == 50 and not caplog.records
    assert settled.key == SplitOptions().key == "auto/50/0.25"


def test_the_default_is_fitted_to_a_small_model_in_one_log_line(caplog):
    """max_new_tokens 24: 23 frames speak at most 15 tokens (1.5 frames each)."""
    budget = FrameBudget(24)
    with caplog.at_level(logging.INFO, logger="qtts"):
        settled = settle_segment_limit(SplitOptions(), budget)
    assert settled.max_segment_tokens == 15
    assert budget.too_long(15) is None and budget.too_long(16) is not None
    (record,) = caplog.records
    assert record.getMessage().startswith("--max-segment-tokens 15: the default 50 is more")


def test_a_given_limit_is_the_users_call():
    budget = FrameBudget(24)
    given = SplitOptions(max_segment_tokens=10)
    assert settle_segment_limit(given, budget) == given
    refused = r"--max-segment-tokens 50 is more than this model .*\(max_new_tokens 24\)\); lower it"
    with pytest.raises(UsageError, match=refused):
        settle_segment_limit(SplitOptions(max_segment_tokens=50), budget)


def test_no_split_needs_no_limit():
    none = SplitOptions("none")
    assert settle_segment_limit(none, FrameBudget(1)) == none


def test_a_model_that_cannot_speak_one_token_is_refused_in_one_line():
    with pytest.raises(UsageError, match="cannot speak even a one-token segment"):
        settle_segment_limit(SplitOptions(), FrameBudget(1))
