# The device-fleet simulator: python -m producer. No JVM.
# Build from the repository root: docker build -f infra/docker/producer.Dockerfile .
FROM python:3.11.13-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/venv
COPY pyproject.toml README.md ./
COPY infra/docker/constraints.txt infra/docker/constraints.txt
COPY common common
COPY producer producer
# Install the dependencies only; the code runs from /app (PYTHONPATH), one copy of it.
RUN /opt/venv/bin/pip install --constraint infra/docker/constraints.txt ".[producer]" \
    && /opt/venv/bin/pip uninstall --yes iot-pulse

FROM python:3.11.13-slim-bookworm
# /data/producer (the run report and manifest) owned by the app user, as in the dashboard
# image: whichever container mounts the shared named volume first initializes it.
RUN groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --create-home --home-dir /home/app app \
    && mkdir -p /data/producer \
    && chown -R app:app /data
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
COPY common common
COPY producer producer
# The code folder is read-only to the app user: local state (logs) goes to its home.
ENV PATH=/opt/venv/bin:$PATH PYTHONPATH=/app PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    IOT_PULSE_HOME=/home/app/.iot-pulse
USER 10001:10001
ENTRYPOINT ["python", "-m", "producer"]
