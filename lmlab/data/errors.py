class DataError(ValueError):
    """A problem with the user's data, stated in one line."""
