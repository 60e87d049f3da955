"""Feedback from searches: the search log, the events on its results, the click model."""
