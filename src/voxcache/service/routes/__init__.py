"""Protocol-compatible routers: GPT-SoVITS ``/tts`` and CosyVoice ``/inference_*``."""
