"""What a study shows: report.md, report.csv, report.json and the terminal's table, the figure against
h, learning curves, BLEU by sentence length, the regime map of a varied study, and the prune report
with the learned gates beside importance pruning and the grid; `mhatrain report` (study_report)
writes a study's."""
