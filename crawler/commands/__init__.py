"""Project commands (``COMMANDS_MODULE``): each module here is a ``scrapy <name>`` command."""
