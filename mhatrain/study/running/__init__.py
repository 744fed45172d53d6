"""What runs a study: `mhatrain ablate` (grid points locally, in parallel slots or as cluster jobs, with
their progress display), `mhatrain prune` (learned head gates per L0 penalty) and `mhatrain export`
(a study's light files, to commit or share)."""
