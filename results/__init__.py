"""results package."""
