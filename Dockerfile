# The Committee HTTP service. Redis is expected at COMMITTEE_REDIS_URL (docker-compose.yml
# sets it); this image ships no redis-server of its own.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /srv/committee
COPY pyproject.toml README.md ./
COPY app/ app/
COPY experiments/ experiments/
COPY models/ models/
COPY storage/ storage/
# the Python client, which `committee import` and `committee export` use
COPY client/ client/
RUN pip install . ./client \
    && groupadd --gid 10001 committee \
    && useradd --create-home --uid 10001 --gid 10001 --shell /usr/sbin/nologin committee

# numba keeps its compiled kernels in the user's ~/.cache: compile them now, as that user,
# so a container starts warm. Its cache is keyed on the CPU; generic code keeps it valid on
# any x86-64 host the image runs on (a miss only means the warm-up compiles before ready).
ENV NUMBA_CPU_NAME=generic
USER 10001:10001
RUN committee warm
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as u; u.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('COMMITTEE_PORT', '8000'), timeout=4)"]
# beyond loopback the service needs an API key: set COMMITTEE_ADMIN_KEY (or make one with
# `committee keys create` against the same Redis first); it refuses to start open otherwise
CMD ["committee", "serve", "--host", "0.0.0.0"]
