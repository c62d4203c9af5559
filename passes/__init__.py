"""Loam's passes, one per module (their registry by name is `loam.driver.passes.get_all_passes`)."""
