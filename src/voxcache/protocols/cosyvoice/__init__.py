"""CosyVoice's FastAPI server: the ``/inference_*`` form mapping (``mapping``), the upstream
client (``upstream``), the persistent zero-shot prompt cache for an embedded frontend
(``prompts``) and the compatible routes (``route``)."""
