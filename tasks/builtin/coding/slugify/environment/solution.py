def slugify(text: str) -> str:
    """Return the URL slug of text (see the task instruction)."""
    raise NotImplementedError
