"""Compression methods, one module (or package) each, built from ``conf/method/*.yaml`` by ``_target_``.

A method depends only on the core (``harness.types``, ``harness.protocols``, ``harness.text``,
``harness.resources``); methods combine by composition in config, never by importing each other's internals.
"""
