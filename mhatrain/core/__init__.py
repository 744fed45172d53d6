"""Layer 1, what every stage shares: the config tree, user-fixable errors, atomic files, how this process
computes (threads, precision, device, torchrun group), the run directory's files and checkpoints, fault
points for the crash tests, and provenance. Imports nothing else of mhatrain."""
