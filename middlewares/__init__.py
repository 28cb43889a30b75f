"""Downloader and spider middlewares: redirect recording, SSRF guard, batched link dedup."""
