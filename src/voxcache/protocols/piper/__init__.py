"""Piper's own HTTP server (``python -m piper.http_server``): the upstream client (``upstream``)
and the compatible ``/synthesize``, ``/info`` and ``/voices`` routes (``route``)."""
