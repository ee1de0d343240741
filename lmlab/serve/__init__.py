"""`lmlab serve`: a local web playground and JSON API over trained runs."""
