"""Layer 7, the head-count study: its grid on disk, running it (locally, torchrun or SLURM), and its
report (statistics over seeds and test sentences, the verdict's calibration, per-length and per-regime
tables, learning curves, export of the light files)."""
