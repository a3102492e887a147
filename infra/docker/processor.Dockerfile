# The Spark processor: python -m processor run, on Java 17 with the Kafka connector, Delta
# and the Entra ID login handler baked in at build time (no Maven or Ivy at run time).
# Build from the repository root: docker build -f infra/docker/processor.Dockerfile .
FROM python:3.11.13-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install --yes --no-install-recommends openjdk-17-jdk-headless maven \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
RUN python -m venv /opt/venv
COPY pyproject.toml README.md ./
COPY infra/docker/constraints.txt infra/docker/constraints.txt
COPY common common
COPY processor processor
COPY infra/__init__.py infra/jars.py infra/paths.py infra/
COPY infra/maven infra/maven
RUN /opt/venv/bin/pip install --constraint infra/docker/constraints.txt ".[processor]" \
    && /opt/venv/bin/pip uninstall --yes iot-pulse
# The same resolution as on a developer's machine: infra/maven/spark/pom.xml plus the
# processor/jvm/eventhubs-oauth module, minus the jars PySpark already ships.
ENV IOT_PULSE_HOME=/build/state
RUN /opt/venv/bin/python -m infra.jars spark \
    && rm -rf /root/.m2

FROM python:3.11.13-slim-bookworm
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install --yes --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --create-home --home-dir /home/app app \
    && mkdir -p /data/lake \
    && chown -R app:app /data
COPY --from=build /opt/venv /opt/venv
COPY --from=build /build/state/jars/spark /opt/iot-pulse/jars
WORKDIR /app
COPY common common
COPY processor processor
ENV PATH=/opt/venv/bin:$PATH PYTHONPATH=/app PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    PYSPARK_PYTHON=/opt/venv/bin/python \
    IOT_PROCESSOR_JARS_DIR=/opt/iot-pulse/jars \
    IOT_LAKE_ROOT=/data/lake \
    IOT_PULSE_HOME=/home/app/.iot-pulse
USER 10001:10001
# Healthy once the hot path has committed a micro-batch (no JVM: a look at its checkpoint).
HEALTHCHECK --interval=10s --timeout=5s --start-period=300s --retries=3 \
    CMD ["python", "-m", "processor.health"]
ENTRYPOINT ["python", "-m", "processor"]
CMD ["run"]
