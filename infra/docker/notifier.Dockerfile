# The alert notifier: python -m notifier (the alerts topic to webhooks). No JVM.
# Build from the repository root: docker build -f infra/docker/notifier.Dockerfile .
FROM python:3.11.13-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/venv
COPY pyproject.toml README.md ./
COPY infra/docker/constraints.txt infra/docker/constraints.txt
COPY common common
COPY notifier notifier
# Install the dependencies only; the code runs from /app (PYTHONPATH), one copy of it.
RUN /opt/venv/bin/pip install --constraint infra/docker/constraints.txt ".[notifier]" \
    && /opt/venv/bin/pip uninstall --yes iot-pulse

FROM python:3.11.13-slim-bookworm
# /data/notifier (the delivery ledger, SQLite) owned by the app user, as in the dashboard
# image: whichever container mounts the shared named volume first initializes it, and
# both write to it (a reader of a WAL-mode database writes its shared-memory index).
RUN groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --create-home --home-dir /home/app app \
    && mkdir -p /data/notifier \
    && chown -R app:app /data
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
COPY common common
COPY notifier notifier
# The code folder is read-only to the app user: local state (logs, and the ledger unless
# IOT_NOTIFIER_LEDGER_PATH names another file) goes to its home.
ENV PATH=/opt/venv/bin:$PATH PYTHONPATH=/app PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    IOT_PULSE_HOME=/home/app/.iot-pulse
USER 10001:10001
# No health check: the notifier says nothing between alerts, and one that cannot start
# (no destinations, no broker) exits in one line, which `docker compose ps` shows.
ENTRYPOINT ["python", "-m", "notifier"]
