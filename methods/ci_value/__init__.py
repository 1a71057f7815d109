"""Influence Guided Context Selection (paper 002, Deng et al.; code SJTU-DMTai/RAG-CSM).

- ``CIOracle`` (``oracle.py``): keep the units with positive Contextual Influence value, computed from the
  gold answers with the generator (an upper bound).
- ``CSMSelect`` (``csm.py``): the Contextual influence Surrogate Model predicts the values; keep the positive.
- Training (``python -m methods.ci_value.train``): CSM-st on cached oracle labels (``labels.py``,
  ``rebalance.py``, ``losses.py``) and CSM-e2e through the frozen generator (``e2e.py``).

Modules that need torch import it themselves; importing this package is light.
"""

from .csm import CSMSelect
from .oracle import CIOracle

__all__ = ["CIOracle", "CSMSelect"]
