"""A scorecard's rounds: trials go to the claims still open.

`repetitions: {rounds: [5, 10, 20], budget: 15m}` runs every scenario to the first count; then the card is decided
on what is stored (scorecard.evaluate), and only the cells of the claims still undecided go on to the next count (a
cell: a scenario's workload, e.g. its 64-byte echoes, not its TCP test), and so on, while the next round's estimated
time fits in what is left of the budget. A claim that would need over scorecard.FUTILE times the last count's trials
a cell at its measured CV stops drawing them too.

Why this keeps the card's error rate: the schedule of counts is fixed before any data, and at each of its k looks
the card decides on intervals at 1 - alpha / (m k) and tests at alpha / k over Holm (scorecard.looks). A wrong
verdict at the look where a claim is finally read is one of at most k x m events of probability alpha / (m k) each,
whichever look that is and whatever stopped the others (Bonferroni over the schedule). tests/test_rounds.py
simulates it on every claim kind, at the null, at the band's edges, on skewed and on a noisy machine's trials."""
from __future__ import annotations

from ..results.dataset import load
from ..results.scorecard import measures, open_cells


def still_open(store, cid: int, scenarios: list) -> dict[int, set[int]]:
    """Of the scenarios (matrix.Scenario), each one's workloads (indexes) an undecided claim of the campaign's card
    still needs trials from; a scenario with none is left out."""
    data = load(store, cid)
    selectors = [sel for cells in open_cells(data.campaign.spec or {}, data) for sel in cells]
    out: dict[int, set[int]] = {}
    for sc in scenarios:
        needed = {w for w in range(len(sc.workload_params)) if any(measures(sel, sc, w) for sel in selectors)}
        if needed:
            out[sc.index] = needed
    return out
