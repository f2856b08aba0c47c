"""OpenAI's speech protocol: the body's fields (``fields``), the ``POST /v1/audio/speech``
route (``route``) and the client for an OpenAI-compatible upstream (``upstream``)."""
