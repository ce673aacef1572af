"""What goes wrong with a dataset that a user fixes (a bad file, a damaged cache, no room):
one line, naming the file and what is wrong; the experiment prints it without a traceback."""


class DataError(ValueError):
    """A dataset cannot be made or read as configured."""
