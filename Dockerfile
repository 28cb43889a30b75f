# The crawler worker image: `scrapy crawl site ...` and `scrapy seed site ...` (docker-compose.yml).
# Two stages: the first builds the package's wheel, the second installs only that wheel, so
# the workers run what a user's `pip install` gets, never the source tree.
FROM python:3.11-slim AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# What the wheel is built from.
COPY pyproject.toml README.md ./
COPY crawler/ crawler/
COPY middlewares/ middlewares/
COPY pipelines/ pipelines/
RUN pip wheel --no-deps --wheel-dir /wheels .

FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The wheel, with its dependencies: the workers write to PostgreSQL (the postgres extra)
# through a shared Redis (hiredis).
COPY --from=build /wheels/ /wheels/
RUN set -- /wheels/*.whl \
    && pip install "$1[postgres,hiredis]" \
    && rm -r /wheels \
    && useradd --create-home --uid 10001 crawler \
    && install -d -o crawler /app

WORKDIR /app
# Only the project file that makes /app a Scrapy project (its settings: the package's own).
COPY scrapy.cfg ./

# No listening ports: workers only connect out (Redis, PostgreSQL, the crawled sites).
USER crawler
CMD ["scrapy", "list"]
