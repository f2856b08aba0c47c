"""Voice packs: stored entries moved between nodes as one signed, verifiable file.

``signing`` (Ed25519 keys and signatures), ``manifest`` (one line per entry), ``container``
(a plain ustar archive read strictly), ``select`` (which entries), ``exporter`` /
``importer`` (``pack export`` / ``pack import``), ``identity`` (the engine identity an edge
mirrors), ``publish`` / ``pull`` (a center serving packs, an edge pulling them).
The format, the trust rules and the edge pattern: docs/operating/edge.md.
"""

from __future__ import annotations

from .exporter import Exported, export_pack
from .importer import Imported, import_pack
from .manifest import Line, Manifest
from .select import Selection

__all__ = ["Exported", "Imported", "Line", "Manifest", "Selection", "export_pack",
           "import_pack"]
