"""How to launch and probe external servers (vLLM first). Never imported by the engine core."""
