"""A scorecard's rounds: trials go to the claims still open.

`repetitions: {rounds: [5, 10, 20], budget: 15m}` runs every scenario to the first count; then the card is decided
on what is stored (scorecard.evaluate), and only the scenarios some undecided claim's cells name go on to the next
count, and so on, while the next round's estimated time fits in what is left of the budget.

Why this keeps the card's error rate: the schedule of counts is fixed before any data, and at each of its k looks
the card decides on intervals at 1 - alpha / (m k) and tests at alpha / k over Holm (scorecard.looks). A wrong
verdict at the look where a claim is finally read is one of at most k x m events of probability alpha / (m k) each,
whichever look that is and whatever stopped the others (Bonferroni over the schedule). tests/test_rounds.py
simulates it on every claim kind, at the null, at the band's edges, on skewed and on a noisy machine's trials."""
from __future__ import annotations

from ..results.dataset import load
from ..results.scorecard import matches, open_cells


def still_open(store, cid: int, indexes: list[int]) -> set[int]:
    """Of the scenarios `indexes`, those an undecided claim of the campaign's card still needs trials from."""
    data = load(store, cid)
    selectors = [sel for cells in open_cells(data.campaign.spec or {}, data) for sel in cells]
    return {i for i in indexes if (sc := data.scenarios.get(i)) is not None
            and any(matches(sel, sc["labels"], sc["levels"], None) for sel in selectors)}
