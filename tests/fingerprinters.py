"""Request fingerprinters a project might set as ``REQUEST_FINGERPRINTER_CLASS``
(``-s REQUEST_FINGERPRINTER_CLASS=tests.fingerprinters.VariantFingerprinter``)."""

from __future__ import annotations

from scrapy import Request
from scrapy.utils.request import fingerprint


class VariantFingerprinter:
    """Scrapy's fingerprint with the ``X-Variant`` header: two requests for one URL with
    different variants are two requests."""

    def fingerprint(self, request: Request) -> bytes:
        return fingerprint(request, include_headers=["X-Variant"])


class CaseFoldingFingerprinter:
    """Folds the URL's case: it merges more than the frontier, never less."""

    def fingerprint(self, request: Request) -> bytes:
        return fingerprint(request.replace(url=request.url.lower()))
