"""Tiers: where verified entries are stored (memory, local disk, Redis, S3), one protocol
(``base.Tier``) and one stack (``base.TierStack``) that applies the rules they share."""
