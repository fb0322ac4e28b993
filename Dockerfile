# binlake as a sidecar: `docker build -t binlake .` then
#   docker run -d --name binlake \
#     -v /srv/lake:/var/lib/binlake -v /srv/binlake.toml:/etc/binlake/binlake.toml:ro \
#     -e BINLAKE_SERVER_PASSWORD_FILE=/run/secrets/binlake_password -p 9108:9108 binlake
# The default command is `binlake run`; `docker run --rm binlake check` runs another one.

# --- build a wheel of the project (needs the build backend, which the runtime image does not) ---
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
# The dependency list alone first: the runtime stage installs it in a layer of its own, which a
# change of binlake's code (or of anything else in pyproject.toml) does not invalidate.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /requirements.txt
# A C compiler for the native row decoder (setup.py); the image already has the Python headers.
# The wheel carries the built extension, so the runtime stage needs no compiler.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
COPY setup.py README.md ./
COPY protocol/ protocol/
COPY replica/ replica/
COPY sinks/ sinks/
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# --- runtime ------------------------------------------------------------------------------------
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Dependencies (pyarrow and friends): cached until the dependency list itself changes.
COPY --from=build /requirements.txt /tmp/requirements.txt
RUN pip install --no-cache-dir -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

# binlake itself: the only layer a code change rebuilds.
COPY --from=build /wheels /tmp/wheels
RUN pip install --no-cache-dir --no-deps /tmp/wheels/*.whl \
    && rm -rf /tmp/wheels

# A fixed uid/gid so the lake volume's ownership is predictable on the host.
RUN groupadd --system --gid 10001 binlake \
    && useradd --system --uid 10001 --gid binlake --home-dir /var/lib/binlake \
       --no-create-home --shell /usr/sbin/nologin binlake \
    && mkdir -p /var/lib/binlake /etc/binlake \
    && chown binlake:binlake /var/lib/binlake

# The config file (optional: every key also has a BINLAKE_* variable) is read from
# /etc/binlake/binlake.toml when it exists; the lake's default path is /var/lib/binlake.
# Metrics listen on all interfaces inside the container so Prometheus can scrape them. This is
# a *default* (BINLAKE_DEFAULT_<SECTION>_<KEY>): metrics.address in a mounted config file, a
# BINLAKE_METRICS_ADDRESS variable or --metrics-address still wins.
ENV BINLAKE_DEFAULT_METRICS_ADDRESS=0.0.0.0:9108

VOLUME ["/var/lib/binlake"]
EXPOSE 9108
WORKDIR /var/lib/binlake
USER 10001:10001

# Liveness: `binlake health` asks /healthz wherever the configuration put the endpoint. Not
# readiness (/readyz): a daemon catching up on a long binlog is behind, not broken, and must not
# be restarted for it — orchestrators probe /readyz themselves (see the README's Kubernetes
# example, or `binlake health --ready`).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["binlake", "health"]

# binlake handles SIGTERM itself (flush, commit, exit 0); run it directly as PID 1.
ENTRYPOINT ["binlake"]
CMD ["run"]
