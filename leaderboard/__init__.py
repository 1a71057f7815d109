"""Leaderboard: collect run folders into tables, attach the papers' reference numbers and bootstrap
uncertainty, and publish Markdown, CSV, LaTeX, plots and one static HTML page.

Pure functions over pandas tables; it reads run records (``summary.json``, ``predictions.jsonl``) and never
loads a model or imports the harness's heavy parts. ``python -m leaderboard publish <results> <out>``.
"""
