"""Spiders and middlewares that misbehave on purpose, run by tests with ``scrapy runspider``."""
