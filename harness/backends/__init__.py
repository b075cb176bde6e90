"""Backends turn RequestSpecs into RequestRecords: `sim` (virtual clock) and, later, `live` (HTTP)."""
