# The MQTT broker of the compose `mqtt` profile: Debian's Mosquitto on the base image the
# other images use, so that the stack needs no other public image.
# Build from the repository root: docker build -f infra/docker/mosquitto.Dockerfile .
FROM python:3.11.13-slim-bookworm
# mosquitto-clients: mosquitto_pub, for the health check. /data/mosquitto (the sessions
# and queued messages) owned by the app user, which the broker runs as.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install --yes --no-install-recommends mosquitto mosquitto-clients \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --create-home --home-dir /home/app app \
    && mkdir -p /data/mosquitto \
    && chown -R app:app /data
COPY infra/docker/mosquitto.conf /etc/mosquitto/iot-pulse.conf
USER 10001:10001
EXPOSE 1883
# Healthy when the broker takes a QoS 1 message (mosquitto_pub waits for its PUBACK).
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["mosquitto_pub", "-h", "localhost", "-p", "1883", "-q", "1", "-t", "iot-pulse/health", "-m", "ok"]
ENTRYPOINT ["mosquitto", "-c", "/etc/mosquitto/iot-pulse.conf"]
