"""GPT-SoVITS ``api_v2.py``: its ``/tts`` fields (``fields``), the field mapping (``mapping``), the
upstream client (``upstream``) and its weight switches (``switches``), the persistent prompt
cache for an embedded ``TTS`` (``prompts``) and the api_v2-compatible routes (``route``)."""
