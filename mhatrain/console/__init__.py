"""Layer 8, the command line's plumbing, for the commands and their option declarations: the options
several commands declare alike and the parsers of option values (`command_options`), and what Typer does not
do as `mhatrain` needs (`shims`): the words --help and docs/commands.md write for a parameter, the
`--html` option whose value may be left out, `--debug` and `--version`, and the one-line error and
exit status of every failure. Torch-free at import, so that `mhatrain --help` is."""
