"""Every command's parsing and printing, one module per group (parsing.py: how each
subcommand is built), above every package they combine; end-of-run summaries and other output
that spans layers live here, never inside train/."""
