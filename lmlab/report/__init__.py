"""Reports: plots and comparisons people look at."""
