"""Developer tools that run the harness (the CI metric regression gate); not part of the core."""
