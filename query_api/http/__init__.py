"""What every request passes: keys, addresses, rate limits, admission and shedding,
deadlines, errors, timing and metrics."""
