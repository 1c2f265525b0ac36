#!/bin/sh
# Entrypoint of locklab's local PostgreSQL image (built by
# harness/scripts/build-image.sh). It stands in for the official `postgres`
# image where no registry can be reached, and follows that image's contract
# as far as locklab relies on it:
#   - POSTGRES_PASSWORD (required unless POSTGRES_HOST_AUTH_METHOD=trust),
#     POSTGRES_USER (default postgres), POSTGRES_DB (default: the user name),
#     POSTGRES_INITDB_ARGS, POSTGRES_HOST_AUTH_METHOD (default scram-sha-256);
#   - data initialised on first start in $PGDATA;
#   - the server listens on port 5432 on all interfaces of the container;
#   - `docker run IMAGE -c name=value` passes settings to postgres;
#   - runs as the unprivileged user `postgres` (the image's USER).
set -eu

if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
  set -- postgres "$@"
fi

if [ "$1" = postgres ]; then
  : "${PGDATA:=/var/lib/postgresql/data}"
  if [ ! -s "$PGDATA/PG_VERSION" ]; then
    user="${POSTGRES_USER:-postgres}"
    db="${POSTGRES_DB:-$user}"
    method="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}"
    if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$method" != trust ]; then
      echo "error: database is uninitialized and superuser password is not specified." >&2
      echo "       Set POSTGRES_PASSWORD (or POSTGRES_HOST_AUTH_METHOD=trust)." >&2
      exit 1
    fi
    mkdir -p "$PGDATA"
    chmod 700 "$PGDATA"
    pwfile=""
    if [ -n "${POSTGRES_PASSWORD:-}" ]; then
      pwfile="$(mktemp)"
      printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    fi
    # shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a word list, as in the official image
    initdb -D "$PGDATA" --username="$user" ${pwfile:+--pwfile="$pwfile"} \
      --auth-local=trust --auth-host="$method" ${POSTGRES_INITDB_ARGS:-}
    [ -n "$pwfile" ] && rm -f "$pwfile"
    printf '\nhost all all all %s\n' "$method" >>"$PGDATA/pg_hba.conf"
    printf "\nlisten_addresses = '*'\n" >>"$PGDATA/postgresql.conf"
    if [ "$db" != postgres ]; then
      quoted="$(printf '%s' "$db" | sed 's/"/""/g')"
      printf 'CREATE DATABASE "%s";\n' "$quoted" | postgres --single -j -D "$PGDATA" postgres >/dev/null
    fi
    echo "PostgreSQL init process complete; ready for start up."
  fi
fi

exec "$@"
