"""agent: the part that acts -- sandboxes, models, and the execute-verify-correct loop."""
