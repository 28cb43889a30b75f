"""Project commands: each module here is a ``scrapy <name>`` command, registered as an entry
point in pyproject.toml (crawler/entry_points.py)."""
