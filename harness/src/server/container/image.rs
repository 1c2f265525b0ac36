//! The PostgreSQL image a container runs, as a typed description in the style
//! of `testcontainers-modules`: name and tag, environment, command, exposed
//! port and ready condition.

use std::borrow::Cow;

use testcontainers::Image;
use testcontainers::core::{ContainerPort, WaitFor};

use super::SUPERUSER;

/// The official image for `major`: `postgres:<major>`.
pub fn official_image(major: u32) -> String {
    format!("postgres:{major}")
}

/// The stand-in image `harness/scripts/build-image.sh` builds: `locklab/postgres:<major>`.
pub fn local_image(major: u32) -> String {
    format!("locklab/postgres:{major}")
}

/// The data directory inside the container (a tmpfs; `PGDATA`).
pub(super) const PGDATA: &str = "/var/lib/postgresql/data";

/// The port PostgreSQL listens on inside the container.
pub(super) const PORT: ContainerPort = ContainerPort::Tcp(5432);

/// `postgres:17` → (`postgres`, `17`); `host:5000/x/pg` → (`host:5000/x/pg`, `latest`).
pub(super) fn split_image(image: &str) -> (&str, &str) {
    match image.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name, tag),
        _ => (image, "latest"),
    }
}

/// A PostgreSQL server image (the official one, ours, or any that honours
/// the official image's variables): initialised with `POSTGRES_PASSWORD`,
/// `POSTGRES_USER` and `POSTGRES_DB` = `postgres` and
/// `POSTGRES_INITDB_ARGS=--no-sync`, its data in [`PGDATA`], run as
/// `postgres` with [`crate::server::SERVER_SETTINGS`], port 5432 exposed.
/// No `Debug`: it holds the password.
#[derive(Clone)]
pub(super) struct PostgresImage {
    name: String,
    tag: String,
    password: String,
    /// More `name=value` settings, after the harness's own.
    settings: Vec<String>,
}

impl PostgresImage {
    /// The image `reference` (as given to Docker, e.g. `postgres:17`; no tag
    /// means `latest`), its superuser's password `password`, more server
    /// `settings` (`name=value`).
    pub(super) fn new(reference: &str, password: &str, settings: &[String]) -> PostgresImage {
        let (name, tag) = split_image(reference);
        PostgresImage {
            name: name.to_owned(),
            tag: tag.to_owned(),
            password: password.to_owned(),
            settings: settings.to_vec(),
        }
    }
}

impl Image for PostgresImage {
    fn name(&self) -> &str {
        &self.name
    }

    fn tag(&self) -> &str {
        &self.tag
    }

    /// None that testcontainers waits for: the container is ready when a
    /// connection with the password succeeds, which `launch` polls for. A log
    /// line would not do: the official image prints "ready to accept
    /// connections" once for its set-up server and again for the real one.
    fn ready_conditions(&self) -> Vec<WaitFor> {
        Vec::new()
    }

    fn env_vars(&self) -> impl IntoIterator<Item = (impl Into<Cow<'_, str>>, impl Into<Cow<'_, str>>)> {
        [
            ("POSTGRES_PASSWORD", self.password.as_str()),
            ("POSTGRES_USER", SUPERUSER),
            ("POSTGRES_DB", "postgres"),
            ("POSTGRES_INITDB_ARGS", "--no-sync"),
            ("PGDATA", PGDATA),
        ]
    }

    fn cmd(&self) -> impl IntoIterator<Item = impl Into<Cow<'_, str>>> {
        let extra = self.settings.iter().flat_map(|s| ["-c", s.as_str()]);
        std::iter::once("postgres")
            .chain(crate::server::server_setting_args())
            .chain(extra)
    }

    fn expose_ports(&self) -> &[ContainerPort] {
        &[PORT]
    }
}

#[cfg(test)]
mod tests {
    use testcontainers::Image;

    use super::{PostgresImage, split_image};

    #[test]
    fn image_references_split_into_name_and_tag() {
        assert_eq!(split_image("postgres:17"), ("postgres", "17"));
        assert_eq!(split_image("locklab/postgres:18"), ("locklab/postgres", "18"));
        assert_eq!(split_image("host:5000/pg"), ("host:5000/pg", "latest"));
        assert_eq!(split_image("host:5000/pg:16"), ("host:5000/pg", "16"));
        assert_eq!(split_image("postgres"), ("postgres", "latest"));
    }

    #[test]
    fn the_image_runs_postgres_with_the_server_settings() {
        let image = PostgresImage::new("postgres:17", "pw", &["max_locks_per_transaction=256".to_owned()]);
        assert_eq!((image.name(), image.tag()), ("postgres", "17"));
        let cmd: Vec<String> = image.cmd().into_iter().map(|c| c.into().into_owned()).collect();
        assert_eq!(cmd[..3], ["postgres", "-c", "max_connections=300"]);
        // A scenario's own settings come last, so they win.
        assert_eq!(cmd[cmd.len() - 2..], ["-c", "max_locks_per_transaction=256"]);
        let env: Vec<(String, String)> = image
            .env_vars()
            .into_iter()
            .map(|(k, v)| (k.into().into_owned(), v.into().into_owned()))
            .collect();
        assert!(env.contains(&("POSTGRES_PASSWORD".into(), "pw".into())), "{env:?}");
    }
}
