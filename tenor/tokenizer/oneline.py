"""Error text for one-line user errors."""


def one_line(error: BaseException, limit: int = 300) -> str:
    """The error's message with its whitespace (newlines too) squeezed, cut to `limit` chars."""
    return " ".join(str(error).split())[:limit] or type(error).__name__
