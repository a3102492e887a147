# The MQTT -> Kafka bridge: python -m bridge. No JVM.
# Build from the repository root: docker build -f infra/docker/bridge.Dockerfile .
FROM python:3.11.13-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/venv
COPY pyproject.toml README.md ./
COPY infra/docker/constraints.txt infra/docker/constraints.txt
COPY common common
COPY bridge bridge
# Install the dependencies only; the code runs from /app (PYTHONPATH), one copy of it.
RUN /opt/venv/bin/pip install --constraint infra/docker/constraints.txt ".[bridge]" \
    && /opt/venv/bin/pip uninstall --yes iot-pulse

FROM python:3.11.13-slim-bookworm
# The bridge keeps no state of its own: its MQTT session (and what is queued for it)
# lives in the broker, its offsets are Kafka's.
RUN groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --create-home --home-dir /home/app app
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
COPY common common
COPY bridge bridge
COPY infra/docker/log_ready.py /opt/iot-pulse/log_ready.py
# The code folder is read-only to the app user: local state (logs) goes to its home.
ENV PATH=/opt/venv/bin:$PATH PYTHONPATH=/app PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    IOT_PULSE_HOME=/home/app/.iot-pulse
USER 10001:10001
# Healthy once it has subscribed on MQTT and checked Kafka (the line `make demo` waits
# for before the producer publishes: MQTT keeps nothing for a subscription not yet made).
HEALTHCHECK --interval=5s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "/opt/iot-pulse/log_ready.py", "bridge", "[bridge] forwarding"]
ENTRYPOINT ["python", "-m", "bridge"]
