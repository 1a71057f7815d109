"""Analyses of EXIT's classifier (``methods/exit``): ``probe`` (downstream SubEM / CR), ``curve`` (CR by threshold)."""
