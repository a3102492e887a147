# The Streamlit dashboard: reads the gold table with delta-rs. No JVM.
# Build from the repository root: docker build -f infra/docker/dashboard.Dockerfile .
FROM python:3.11.13-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/venv
COPY pyproject.toml README.md ./
COPY infra/docker/constraints.txt infra/docker/constraints.txt
COPY common common
COPY dashboard dashboard
RUN /opt/venv/bin/pip install --constraint infra/docker/constraints.txt ".[dashboard]" \
    && /opt/venv/bin/pip uninstall --yes iot-pulse

FROM python:3.11.13-slim-bookworm
# /data/lake, /data/producer and /data/notifier owned by the app user, as in the
# processor, producer and notifier images: whichever container mounts a shared named
# volume first initializes it.
RUN groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --create-home --home-dir /home/app app \
    && mkdir -p /data/lake /data/producer /data/notifier \
    && chown -R app:app /data
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
COPY common common
COPY dashboard dashboard
# The code folder is read-only to the app user: local state goes to its home.
ENV PATH=/opt/venv/bin:$PATH PYTHONPATH=/app PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    IOT_PULSE_HOME=/home/app/.iot-pulse STREAMLIT_BROWSER_GATHER_USAGE_STATS=false
USER 10001:10001
EXPOSE 8501
# Healthy when every page renders without an error (AppTest), not only when the port answers.
HEALTHCHECK --interval=60s --timeout=90s --start-period=30s --retries=3 \
    CMD ["python", "-m", "dashboard.health"]
ENTRYPOINT ["streamlit", "run", "dashboard/app.py", "--server.address=0.0.0.0", "--server.port=8501", "--server.headless=true"]
