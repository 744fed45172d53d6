"""mhatrain: train, evaluate and study multi-head attention in Transformer translation models.

The package is cut by role, in the order data flows; a module imports only from its own layer and
the ones before it (tests/test_layers.py checks this, and that no import cycle exists):
    core       config, errors, files, runtime, run directories and checkpoints, provenance
    data       sources, tokenizer, token tables, batches
    model      attention, the Transformer, its FLOPs
    inference  search, scoring, a trained run
    training   the step, the loop, averaging
    analysis   attention maps, head importance and roles
    study      a study in four rooms: its grid, its statistics, its reports, running it
    console    the command line's plumbing: option parsers, Typer's help words, the error line, exit codes
    bench      timings against named peers
    cli        the `mhatrain` command
"""

__version__ = "0.1.0"

LAYERS = ("core", "data", "model", "inference", "training", "analysis", "study", "console", "bench", "cli")
