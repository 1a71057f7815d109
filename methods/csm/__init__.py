"""CSM: the Contextual influence Surrogate Model (paper 002, Deng et al.; code SJTU-DMTai/RAG-CSM).

- runtime: ``method.py`` (``CSMSelect``, the ``conf/method/csm*.yaml`` target), ``features.py`` (the frozen pair
  encoder), ``head.py`` (the head over the unit list);
- training: ``train.py`` (``python -m methods.csm.train``; CSM-st on oracle CI labels, CSM-e2e through the frozen
  generator) and its ``train_*.py`` helpers;
- ``artifacts/<profile>/``: the trained heads and the label cache; ``README.md``: their measurements.

The CI values it learns come from ``harness.influence``, which the oracle (``methods/ci_oracle.py``) shares.
Modules that need torch import it themselves; importing this package is light.
"""
