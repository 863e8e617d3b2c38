"""The writers' clock: parts are exclusive (a part inside another counts once, in its own part),
threads add up, and a run's report says when synthesis waited on its writers."""

from __future__ import annotations

import threading
import time

import pytest

from qtts.core.jobs.output.writer import PARTS, WriterClock, WritingReport

NAP = 0.05


def test_a_nested_part_counts_once_in_its_own_part():
    clock = WriterClock()
    start = time.perf_counter()
    with clock.part("write"):
        time.sleep(NAP)
        with clock.part("journal"):
            time.sleep(NAP)
    elapsed = time.perf_counter() - start
    busy = clock.busy()
    assert set(busy) == set(PARTS)
    assert busy["journal"] >= NAP and busy["write"] >= NAP
    # the journal's nap is not the write's too: the two parts share out the elapsed time (no
    # upper bound on a nap itself: a loaded machine oversleeps)
    assert busy["write"] + busy["journal"] <= elapsed


def test_threads_add_up():
    clock = WriterClock()

    def work():
        with clock.part("encode"):
            time.sleep(NAP)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert clock.busy()["encode"] >= 4 * NAP


@pytest.mark.parametrize(
    ("wait_s", "synthesis_s", "says"),
    [(0.5, 100.0, False), (1.5, 100.0, True), (0.5, 10.0, True), (0.0, 0.0, False)],
)
def test_the_hint_comes_after_a_second_or_2_percent(wait_s, synthesis_s, says):
    report = WritingReport(4, wait_s=wait_s, busy_s={"encode": 3.0, "write": 1.0})
    hint = report.hint(synthesis_s)
    assert (hint is not None) == says
    if says:
        assert hint.startswith(f"synthesis waited {wait_s:.1f} s") and "encoding" in hint


def test_the_hint_names_the_disk_when_writing_is_the_busiest_part():
    report = WritingReport(2, wait_s=5.0, busy_s={"encode": 1.0, "journal": 4.0})
    assert "disk" in report.hint(20.0)
