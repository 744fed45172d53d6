"""Layer 1, what every stage shares: the config tree, user-fixable errors, atomic files, how this process
computes (threads, precision, device, torchrun group), the run directory's files and checkpoints, fault
points for the crash tests, provenance, and how numbers, tables and figures are written for people. Imports nothing else of
mhatrain."""
