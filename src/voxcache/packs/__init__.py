"""Voice packs: stored entries moved between nodes as one signed, verifiable file.

- ``signing``: Ed25519 keys (``pack keygen``), signatures over manifests.
- ``manifest``: the manifest (one line per entry: key, kind, size, BLAKE3, tenant, pin…).
- ``container``: the file itself, a plain ustar archive read strictly.
- ``select``: which entries (voice, tenant, revision, top-N by use, age).
- ``exporter`` / ``importer``: ``pack export`` and ``pack import``.
- ``identity``: the engine identity an edge mirrors, carried by every manifest.
- ``publish`` / ``pull``: a center serving packs over HTTP, an edge pulling them.

The format, the trust rules and the edge pattern are described in docs/operating/edge.md.
"""

from __future__ import annotations

from .exporter import Exported, export_pack
from .importer import Imported, import_pack
from .manifest import Line, Manifest
from .select import Selection

__all__ = ["Exported", "Imported", "Line", "Manifest", "Selection", "export_pack",
           "import_pack"]
