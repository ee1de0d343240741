"""The names inference options choose among, kept apart from the modules that use them so
that the command line can offer them without importing torch."""

POOLINGS = ("mean", "mean-all", "cls")
