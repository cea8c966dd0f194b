# pg_shell (the executor, the gateway and the migrate step of
# docker-compose.yml), FROM the same locally debootstrap'd base as the
# sandbox image. Python packages come from the wheelhouse ops/compose/prepare
# builds on the host, so the image builds without a registry.
ARG BASE=pg-shell-base:bookworm
FROM ${BASE}

ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && useradd --system --user-group --home-dir /nonexistent --shell /usr/sbin/nologin pg-shell

COPY build/wheels /tmp/wheels
COPY build/requirements.txt /tmp/requirements.txt
RUN python3 -m venv /opt/pg-shell/.venv \
 && /opt/pg-shell/.venv/bin/pip install --no-index --find-links /tmp/wheels -r /tmp/requirements.txt \
 && rm -rf /tmp/wheels /root/.cache
# The source tree itself (executor/, sql/, html/): migrations and the UI are
# read from beside the package.
COPY build/src /opt/pg-shell
COPY pg-shell /usr/local/bin/pg-shell
RUN install -d -m 0700 /var/lib/pg-shell

ENV LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /opt/pg-shell
ENTRYPOINT ["/usr/local/bin/pg-shell"]
