"""One-off analyses: each script says what question it answered and where its figures are. Nothing under
``harness/`` or ``methods/`` imports this package."""
