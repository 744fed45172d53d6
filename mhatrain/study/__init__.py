"""Layer 7, the head-count study, cut into four rooms by the job each file does. A room imports from
itself and the rooms before it only (tests/test_layers.py checks it, as it does the package's layers):
    grid      what a study is: its points and cells (points), its fixed layouts (fixed_layouts), its
              directory, record and lock (directory), and what its runs wrote (run_records)
    stats     what a study's numbers support: the h × seed-block tests, their sensitivity and
              calibration, the interaction tests of a varied study, each h against h=8, each fixed
              layout against h=8 and h=1
    reports   what a study shows: report.md, .csv, .json and the terminal table, the figure, the
              learning curves, the regime map, the prune report
    running   what runs a study: `ablate` (locally, in parallel, on a cluster), `prune`, `export`, and
              the grid's progress display; it comes last because a run ends by writing its report
"""

LAYERS = ("grid", "stats", "reports", "running")
