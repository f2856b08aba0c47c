"""Test suites shipped with voxcache for code that plugs into it (needs pytest).

``tier_contract.TierContract`` is what every tier — voxcache's own and yours —
must pass to stand in a ``TierStack``. Subclass it in a test module and give it
a ``tier`` fixture.
"""
