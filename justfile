# locklab tasks. Install just with `pip install rust-just` (or use the cargo
# commands in docs/src/getting-started.md, which need nothing but the Rust toolchain).

# List the recipes.
default:
    @just --list

# Install the PostgreSQL binaries into .cache/postgres/MAJOR, PgBouncer into .cache/pgbouncer, the Python columns' packages into .cache/python and the Java, Go and Node columns' packages into .cache (the harness also does these on first use), and Chromium (Debian's package, as root) for the HTML report's check and screenshot.
setup major="17":
    bash harness/scripts/install-postgres.sh {{major}}
    bash harness/scripts/install-pgbouncer.sh
    for set in asyncpg-0.31 asyncpg-0.32 psycopg-3.3 psycopg2-2.9 sqlalchemy-2.0; do bash drivers/adapters/python/install.sh $set; done
    bash drivers/adapters/java/install.sh hikaricp
    bash drivers/adapters/go/install.sh
    bash drivers/adapters/node/install.sh pg-8.14
    bash harness/scripts/install-chromium.sh

# Install promtool (Debian's prometheus package, unpacked; no Prometheus service) into .cache/promtool, for the checks of deploy/ (holders/tests/deploy.rs also does this on first use).
promtool:
    bash harness/scripts/install-promtool.sh

# Build the pooler image locklab/poolers:trixie-2 (Debian 13's PgBouncer 1.24, Pgpool-II 4.6, pgagroal 1.6 and socat; Debian sid's Odyssey 1.5) for the pgbouncer-trixie-*, pgpool*, pgagroal-* and odyssey-* columns (needs root and Docker; skipped when it exists).
pooler-image:
    bash harness/scripts/build-pooler-image.sh

# Build the stand-in PostgreSQL image locklab/postgres:MAJOR for machines that cannot pull postgres:MAJOR (needs root and Docker; skipped when it exists).
image major="17":
    bash harness/scripts/build-image.sh {{major}}

# Build the container image locklab/holders:latest (deploy/holders/Dockerfile): the release locklab-holders binary on locklab/debian:bookworm, a Debian 12 minbase with ca-certificates (needs Docker, and root for the base; skipped when it exists; e.g. just holders-image locklab/holders:dev).
holders-image tag="locklab/holders:latest":
    bash harness/scripts/build-holders-image.sh {{tag}}

# Run every scenario × driver and rewrite reports/ (matrix.json, matrix.md, index.html and its screenshot index.png); e.g. just report --repeat 20, just report --pg 16,17,18 --out DIR.
report *args:
    cargo run --release --quiet -p locklab --features internals -- report --screenshot {{args}}

# Compare a fresh run of the matrix with reports/baseline/ (one file per scenario); exits 1 with a per-cell diff on any change and writes each changed scenario as a pending NAME.json.new (e.g. just check -d sqlx; then just review).
check *args:
    cargo run --release --quiet -p locklab --features internals -- check {{args}}

# What `cargo test` leaves out, in one command: the whole matrix with every race cell at its full trials, on the main backend (a container when a Docker engine answers) and then on the local cluster, each compared with reports/baseline/; about 15 minutes per backend on two cores (e.g. just check-full -d sqlx).
check-full *args:
    cargo run --release --quiet -p locklab --features internals -- check {{args}}
    cargo run --release --quiet -p locklab --features internals -- check --backend local {{args}}

# Another version of a Rust pool crate against the matrix, next to the built-in column, as check --upgrade prints it (e.g. just try deadpool-postgres@0.12; just try sqlx@0.7 -s session-lock-pool-return); builds it in ~/.cache/locklab/try, cached per crate and version.
try *args:
    cargo run --release --quiet -p locklab --features internals -- try {{args}}

# Determinism soak: the whole matrix 50 times over (about 1 min per round; PostgreSQL 17 unless --pg says otherwise); prints each cell whose outcome differed between rounds and the count of runs and of differing cells, and exits 1 if any differed (e.g. just soak --rounds 5 -d sqlx).
soak *args:
    cargo run --release --quiet -p locklab --features internals -- soak {{args}}

# Build the book (docs/) into target/book/html and check its internal links; installs mdbook and mdbook-linkcheck2 into .cache/tools on first use.
docs:
    bash harness/scripts/build-docs.sh

# Fuzz the scenario parser and validator with cargo-fuzz (libFuzzer) for SECONDS (default 600), seeded from scenarios/ and the invalid fixtures; installs cargo-fuzz into .cache/tools on first use.
fuzz seconds="600":
    bash harness/scripts/fuzz.sh {{seconds}}

# Accept or reject the pending baseline files `just check` wrote: in a terminal one scenario at a time (a accept, r reject, s skip), or by name (e.g. just review --accept unlock-all; just review --accept-all).
review *args:
    cargo run --release --quiet -p locklab --features internals -- review {{args}}

# Rewrite the accepted baseline files from a fresh run (3 repeats per cell), only the scenarios whose cells differ and only those cells; a scenario with a failed cell is not written (e.g. just baseline -s NAME for a new scenario). Do this deliberately, after reading `just check`.
baseline *args:
    cargo run --release --quiet -p locklab --features internals -- check --update --repeat 3 {{args}}

# The version matrix: every scenario × driver on PostgreSQL 14-18, into reports/versions/.
report-versions:
    cargo run --release --quiet -p locklab --features internals -- report --pg 14,15,16,17,18 --out reports/versions

# The load report into reports/load/ (load.md, load.json, curve-keys-*.svg): W workers contending through tokio-postgres, deadpool, bb8 and sqlx next to pgbench with the same SQL, every critical section checked; about eight minutes (e.g. just load --seconds 5).
load *args:
    cargo run --release --quiet -p locklab --features internals -- load-report {{args}}

# One load run per driver next to pgbench, printed as a table (e.g. just stress -w 64 -k 1 --pattern xact-try -d bb8).
stress *args:
    cargo run --release --quiet -p locklab --features internals -- stress {{args}}

# Who holds and who awaits advisory locks on a running server, with a verdict per lock (LOCKLAB_DSN or --dsn; e.g. just holders --fail-on leaked, just holders serve). See docs/src/holders.md.
holders *args:
    cargo run --release --quiet -p locklab --features internals -- holders {{args}}

# What a cell costs next to the same SQL from a bare client on the same server (docs/src/speed.md): per kind of cell (plain through a column of each family, a race, a fault) and backend (the local cluster, and a container when a Docker engine answers), wall time per run and per cell, CPU per cell, the matrix's cells per second; about two minutes (e.g. just bench --runs 100 --only plain).
bench *args:
    cargo run --release --quiet -p locklab --features internals -- bench {{args}}

# How the holders snapshot grows from 100 to 10,000 advisory locks over 200 connections, against a plain pg_locks join in the same run (a local cluster of its own; a Markdown table).
bench-holders:
    cargo bench -p locklab --features internals --bench holders

# Run scenarios × drivers and print the results (e.g. just run -s lock-timeout-200ms -d sqlx).
run *args:
    cargo run --release --quiet -p locklab --features internals -- run {{args}}

# Check scenario and property files (default: all of scenarios/ and properties/).
validate *files:
    cargo run --quiet -p locklab --features internals -- validate {{files}}

# Regenerate the JSON Schemas from the Rust types: the scenario format's (scenarios/scenario.schema.json), the driver protocol's (drivers/adapters/protocol.schema.json) and the property files' (properties/property.schema.json).
schema:
    cargo run --quiet -p locklab --features internals -- schema scenario > scenarios/scenario.schema.json
    cargo run --quiet -p locklab --features internals -- schema protocol > drivers/adapters/protocol.schema.json
    cargo run --quiet -p locklab --features internals -- schema property > properties/property.schema.json

# The properties judged per column, with a card per column (e.g. just verdict --from reports/matrix.json -d sqlx; just verdict -d asyncpg-0.32 --require-severity unsafe exits 1 on an unsafe violation).
verdict *args:
    cargo run --release --quiet -p locklab --features internals -- verdict {{args}}

# List scenarios and drivers.
list:
    cargo run --quiet -p locklab --features internals -- list

# The test suite (the same command CI runs).
test:
    cargo test
