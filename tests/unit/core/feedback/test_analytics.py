"""`photosearch analytics`'s figures on a recorded log equal a hand count."""

from __future__ import annotations

from core.feedback.analytics import RankRate, analyse
from tests.unit.core.feedback.conftest import EVENTS, RECORDS


def test_searches_zero_result_and_no_click_queries_are_counted_as_by_hand() -> None:
    figures = analyse(RECORDS, EVENTS)
    assert (figures.searches, figures.text_searches, figures.sessions) == (14, 13, 3)
    # Three searches of "unicorn" showed nothing; H showed nothing past the last page.
    assert figures.zero_result == [("unicorn", 3)]
    assert figures.zero_result_searches == 3
    # Showed results, got no opened or downloaded: D, E (skips only) and G of "red car".
    assert figures.no_click == [("red car", 3)]
    assert figures.no_click_searches == 3
    # A B C F (red car), I J (blue boat), N (the image search).
    assert figures.searches_with_a_click == 7
    assert figures.events == {"downloaded": 1, "opened": 8, "skipped": 3}


def test_the_click_through_rate_by_rank_counts_each_search_once_per_rank() -> None:
    figures = analyse(RECORDS, EVENTS)
    # Shown at rank 1: A-G (7), I, J, N = 10; 2: the same 10; 3-5: A-G = 7.
    # Clicked at rank 1: B (a), J (y) = 2; rank 2: C (b), I (y), N (b) = 3;
    # rank 3: A, C (c) = 2; rank 4: F (d) = 1; rank 5: none.
    assert figures.by_rank == [
        RankRate(1, 10, 2),
        RankRate(2, 10, 3),
        RankRate(3, 7, 2),
        RankRate(4, 7, 1),
        RankRate(5, 7, 0),
    ]
    assert figures.by_rank[1].ctr == 0.3


def test_the_top_is_cut_and_the_figures_read_as_json() -> None:
    figures = analyse(RECORDS, EVENTS, top=0)
    assert figures.zero_result == [] and figures.zero_result_searches == 3
    as_json = analyse(RECORDS, EVENTS).to_dict()
    assert as_json["zero_result"] == [{"query": "unicorn", "searches": 3}]
    assert as_json["by_rank"][0] == {"rank": 1, "shown": 10, "clicked": 2, "ctr": 0.2}
