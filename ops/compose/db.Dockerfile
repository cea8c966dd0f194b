# PostgreSQL 15 for the all-in-one deployment (docker-compose.yml), built
# FROM the same locally debootstrap'd base as the sandbox image: no registry.
ARG BASE=pg-shell-base:bookworm
FROM ${BASE}

ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends postgresql-15 \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/data \
 && install -d -o postgres -g postgres /var/run/postgresql

COPY db-entrypoint /usr/local/bin/db-entrypoint
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PGDATA=/var/lib/postgresql/data \
    LANG=C.UTF-8
USER postgres
EXPOSE 5432
HEALTHCHECK --interval=1s --timeout=3s --retries=60 CMD pg_isready -q -h 127.0.0.1 -U postgres -d pg_shell
ENTRYPOINT ["/usr/local/bin/db-entrypoint"]
