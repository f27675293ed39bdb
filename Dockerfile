# syntax=docker/dockerfile:1
# Two stages: wheels are built with the compilers of the full image; the runtime
# image has only Python, the wheels and a user without privileges.

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md alembic.ini ./
COPY gateway gateway
COPY memory memory
COPY connectors connectors
COPY migrations migrations
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --create-home --uid 10001 parley \
    && mkdir /data && chown parley:parley /data
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER parley
WORKDIR /home/parley
ENV PARLEY_HOST=0.0.0.0 \
    PARLEY_PORT=8080 \
    PARLEY_DATA_DIR=/data \
    PYTHONUNBUFFERED=1
VOLUME /data
EXPOSE 8080
# Slim images have no curl; Python is there anyway. Ready, not merely alive: the
# database answers and the schema is current.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8080/readyz', timeout=4); sys.exit(0)"]
ENTRYPOINT ["parley"]
CMD ["serve"]
