# The crawler worker image: `scrapy crawl site ...` and `scrapy seed site ...` (docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
# What `pip install .` builds from, then the project file that makes /app a Scrapy project.
# The workers write to PostgreSQL (the postgres extra) through a shared Redis (hiredis).
COPY pyproject.toml README.md ./
COPY crawler/ crawler/
COPY middlewares/ middlewares/
COPY pipelines/ pipelines/
RUN pip install '.[postgres,hiredis]' \
    && useradd --create-home --uid 10001 crawler \
    && chown crawler /app
COPY scrapy.cfg ./

# No listening ports: workers only connect out (Redis, PostgreSQL, the crawled sites).
USER crawler
CMD ["scrapy", "list"]
