"""EXIT: context-aware extractive compression (Hwang et al. 2024, arXiv 2412.12559).

- runtime: ``method.py`` (``Exit``, the ``conf/method/exit.yaml`` target), ``classifier.py`` (the embedded
  profile's trained cross-encoder);
- training: ``train.py`` (``python -m methods.exit.train``), ``train_data.py`` (questions and labels),
  ``train_classifier.py`` (the cross-encoder's training loop);
- ``artifacts/<profile>/``: the trained classifier, its labels and manifest; ``README.md``: its measurements.
"""
