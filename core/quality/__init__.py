"""Relevance measured offline: judgement sets, ranking metrics with bootstrap intervals, and
the evaluation of a collection's rankings against a set (`photosearch eval`, the reindex's
quality gate)."""
