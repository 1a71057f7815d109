"""RAG context-compression benchmark harness: the core (types, data, generator, metrics, records, run loop).

The core knows no method: methods live in ``methods/`` and are built from Hydra configs by ``_target_``.
"""

__version__ = "0.1.0"
