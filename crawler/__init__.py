"""A distributed Scrapy crawler frontier with canonical URL keys and Bloom-filter dedup."""
