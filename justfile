# locklab tasks. Install just with `pip install rust-just` (or use the cargo
# commands in the README, which need nothing but the Rust toolchain).

# List the recipes.
default:
    @just --list

# Install the PostgreSQL binaries into .cache/postgres/MAJOR and PgBouncer into .cache/pgbouncer (the harness also does both on first use).
setup major="17":
    bash harness/scripts/install-postgres.sh {{major}}
    bash harness/scripts/install-pgbouncer.sh

# Build the stand-in PostgreSQL image locklab/postgres:MAJOR for machines that cannot pull postgres:MAJOR (needs root and Docker; skipped when it exists).
image major="17":
    bash harness/scripts/build-image.sh {{major}}

# Run every scenario × driver and rewrite reports/matrix.md and reports/matrix.json (e.g. just report --pg 16,17,18 --out DIR).
report *args:
    cargo run --release --quiet -p locklab -- report {{args}}

# The version matrix: every scenario × driver on PostgreSQL 14-18, into reports/versions/.
report-versions:
    cargo run --release --quiet -p locklab -- report --pg 14,15,16,17,18 --out reports/versions

# Run scenarios × drivers and print the results (e.g. just run -s lock-timeout-200ms -d sqlx).
run *args:
    cargo run --release --quiet -p locklab -- run {{args}}

# Check scenario files (default: all of scenarios/).
validate *files:
    cargo run --quiet -p locklab -- validate {{files}}

# Regenerate the scenario format's JSON Schema (scenarios/scenario.schema.json) from the Rust types.
schema:
    cargo run --quiet -p locklab -- schema > scenarios/scenario.schema.json

# List scenarios and drivers.
list:
    cargo run --quiet -p locklab -- list

# The test suite (the same command CI runs).
test:
    cargo test
