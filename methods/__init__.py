"""Compression methods, built from ``conf/method/*.yaml`` by ``_target_``: one module per single-file method, one
package per method of more than one file (``method.py`` the runtime and the only thing a target names,
``train.py`` and its ``train_*.py`` helpers, ``artifacts/<profile>/``, ``README.md``; docs/adding-a-method.md).

A method depends only on the core (``harness.types``, ``harness.protocols``, ``harness.text``, ``harness.influence``)
and the model layer (``harness.lm``); methods combine by composition in config, never by importing each other.
"""
