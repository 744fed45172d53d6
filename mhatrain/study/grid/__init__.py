"""A study's grid: its points and cells, the study directory with its record and lock, and what the
runs of its points wrote (the records the statistics and reports read)."""
