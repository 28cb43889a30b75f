"""Item pipelines and the record store (pages, redirect chains, canonical hints, aliases)."""
