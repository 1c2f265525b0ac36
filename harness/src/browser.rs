//! Headless Chromium, to check that `index.html` renders and to screenshot it.
//!
//! Uses Chromium's own headless switches (`--headless --dump-dom`,
//! `--screenshot`, `--window-size`; see `chromium --help` and the Chromium
//! headless documentation). Each call gets a throw-away profile directory, runs
//! in its own process group and is killed (with its helper processes) at its
//! deadline.
//!
//! Chromium is installed on first use when none is found and this can be
//! done here (see [`availability`]): as root with apt-get, by
//! `harness/scripts/install-chromium.sh` (Debian's `chromium` package; the
//! script takes a lock, so several processes asking at once install it once),
//! unless `LOCKLAB_NO_INSTALL=1`. The PostgreSQL binaries and PgBouncer are
//! installed the same way, privately into `.cache/`; Chromium is a system
//! package, which is why it alone can be opted out of.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, mpsc};
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// How long one Chromium call may take, in s.
pub const BROWSER_DEADLINE: Duration = Duration::from_secs(60);

/// Names tried on `PATH`, in order, when `LOCKLAB_CHROMIUM` is not set.
const NAMES: [&str; 4] = ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"];

/// The Chromium binary: `LOCKLAB_CHROMIUM`, else the first of `chromium`,
/// `chromium-browser`, `google-chrome`, `google-chrome-stable` on `PATH`.
///
/// # Errors
/// None found (with how to install one), or `LOCKLAB_CHROMIUM` not a file.
pub fn find_chromium() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("LOCKLAB_CHROMIUM").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!("LOCKLAB_CHROMIUM={} is not a file", p.display());
        }
        return Ok(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in NAMES {
            let p = dir.join(name);
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    bail!(
        "no Chromium found (tried {} on PATH; set LOCKLAB_CHROMIUM to use another): \
         on Debian, `apt-get install chromium` (`just setup` does it)",
        NAMES.join(", ")
    )
}

/// Set to `1` (any value but empty or `0`) to never install Chromium on first use.
pub const NO_INSTALL_ENV: &str = "LOCKLAB_NO_INSTALL";

/// The install script shared by the harness and `just setup`.
pub fn install_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-chromium.sh")
}

/// Whether Chromium can be had, as far as can be told without installing it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Availability {
    /// Found ([`find_chromium`]).
    Found(PathBuf),
    /// Not found, but [`chromium`] will try to install it: we are root,
    /// apt-get is there, and `LOCKLAB_NO_INSTALL` is not set.
    Installable,
    /// Not found and not installable here; why, and what to do.
    Unavailable(String),
}

fn no_install() -> bool {
    std::env::var(NO_INSTALL_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}

fn on_path(name: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|d| d.join(name).is_file())
}

/// Whether Chromium is there or could be installed on first use; installs
/// nothing (cheap: looks at `LOCKLAB_CHROMIUM`, `PATH`, the user id).
pub fn availability() -> Availability {
    if let Ok(p) = find_chromium() {
        return Availability::Found(p);
    }
    if let Some(p) = std::env::var_os("LOCKLAB_CHROMIUM").filter(|p| !p.is_empty()) {
        return Availability::Unavailable(format!("LOCKLAB_CHROMIUM={} is not a file", Path::new(&p).display()));
    }
    if no_install() {
        return Availability::Unavailable(format!(
            "no Chromium found, and {NO_INSTALL_ENV} is set: not installing it \
             (install Chromium, or set LOCKLAB_CHROMIUM)"
        ));
    }
    if !on_path("apt-get") {
        return Availability::Unavailable(
            "no Chromium found, and no apt-get to install it with (install Chromium and set LOCKLAB_CHROMIUM)".into(),
        );
    }
    if !nix::unistd::geteuid().is_root() {
        return Availability::Unavailable(
            "no Chromium found, and installing Debian's chromium package needs root \
             (`sudo bash harness/scripts/install-chromium.sh`, or set LOCKLAB_CHROMIUM)"
                .into(),
        );
    }
    Availability::Installable
}

/// The Chromium binary ([`find_chromium`]); when there is none and it is
/// [`Availability::Installable`], installs it first with [`install_script`],
/// saying so on stderr (the script prints what it does). One attempt per
/// process; the script's lock makes concurrent attempts install it once.
///
/// # Errors
/// Chromium is [`Availability::Unavailable`] (the reason), or the install
/// failed (its output is on stderr above).
pub fn chromium() -> Result<PathBuf> {
    if let Ok(p) = find_chromium() {
        return Ok(p);
    }
    static INSTALLED: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    INSTALLED
        .get_or_init(|| match availability() {
            Availability::Found(p) => Ok(p),
            Availability::Unavailable(why) => Err(why),
            Availability::Installable => install(),
        })
        .clone()
        .map_err(|e| anyhow::anyhow!(e))
}

fn install() -> Result<PathBuf, String> {
    let script = install_script();
    eprintln!(
        "locklab: no Chromium found (for the HTML report's check and screenshot); installing \
         Debian's chromium package with apt-get, once per machine ({}; {NO_INSTALL_ENV}=1 skips this)",
        script.display()
    );
    let status = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run bash for {}: {e}", script.display()))?;
    match find_chromium() {
        Ok(p) if status.success() => {
            eprintln!("locklab: Chromium installed: {}", p.display());
            Ok(p)
        }
        _ => Err(format!(
            "no Chromium found, and installing it failed ({} exited with {status}; its output is above)",
            script.display()
        )),
    }
}

/// Chromium runs in flight: (process group, profile directory), for [`kill_running`].
static RUNNING: Mutex<Vec<(i32, PathBuf)>> = Mutex::new(Vec::new());

/// Ends every Chromium started by this process that is still running (its
/// whole process group) and removes its profile directory: for a signal
/// handler that is about to exit the process.
pub fn kill_running() {
    let running = std::mem::take(&mut *RUNNING.lock().unwrap_or_else(|e| e.into_inner()));
    for (pgid, profile) in running {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), nix::sys::signal::Signal::SIGKILL);
        let _ = std::fs::remove_dir_all(profile);
    }
}

/// Runs Chromium headless on the local file `page` with `args` and returns
/// what it wrote to stdout. Chromium's stdout and stderr go to files in its
/// throw-away profile directory, so that nothing depends on when its helper
/// processes close a pipe; the deadline is on the browser process itself.
fn run(page: &Path, args: &[String]) -> Result<String> {
    let chromium = chromium()?;
    let page = std::fs::canonicalize(page).with_context(|| format!("cannot open {}", page.display()))?;
    let url =
        url::Url::from_file_path(&page).map_err(|()| anyhow::anyhow!("{} cannot be a file: URL", page.display()))?;
    let profile = tempfile::Builder::new()
        .prefix("locklab-chromium-")
        .tempdir()
        .context("cannot create a Chromium profile directory")?;
    let (out_path, err_path) = (profile.path().join("stdout"), profile.path().join("stderr"));
    let mut cmd = Command::new(&chromium);
    cmd.arg("--headless")
        .arg("--disable-gpu")
        .arg("--no-first-run")
        .arg("--hide-scrollbars")
        .arg(format!("--user-data-dir={}", profile.path().join("profile").display()))
        .args(args);
    if nix::unistd::geteuid().is_root() {
        // Chromium refuses to run as root with its sandbox.
        cmd.arg("--no-sandbox");
    }
    let file = |p: &Path| std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()));
    cmd.arg(url.as_str())
        .stdin(Stdio::null())
        .stdout(file(&out_path)?)
        .stderr(file(&err_path)?)
        .process_group(0);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {}", chromium.display()))?;
    let pgid = child.id() as i32;
    RUNNING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((pgid, profile.path().to_path_buf()));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let finished = rx.recv_timeout(BROWSER_DEADLINE);
    // Chromium's helper processes share its process group: end any left
    // (and, on a timeout, the browser itself, which lets the waiter return).
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), nix::sys::signal::Signal::SIGKILL);
    RUNNING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|(p, _)| *p != pgid);
    let status = match finished {
        Ok(status) => status.context("waiting for Chromium")?,
        Err(_) => bail!(
            "{} did not finish within {} s on {}",
            chromium.display(),
            BROWSER_DEADLINE.as_secs(),
            page.display()
        ),
    };
    let out = std::fs::read_to_string(&out_path).unwrap_or_default();
    if !status.success() {
        let err = std::fs::read_to_string(&err_path).unwrap_or_default();
        let mut tail: Vec<&str> = err.lines().rev().take(10).collect();
        if tail.is_empty() {
            tail.push("(nothing on stderr)");
        }
        bail!(
            "{} failed ({status}) on {}:\n{}",
            chromium.display(),
            page.display(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    Ok(out)
}

/// The DOM of `page` as Chromium serialises it after loading and laying it
/// out (`--dump-dom`).
///
/// # Errors
/// No Chromium (installed on first use, see [`chromium`]), a failed or
/// timed-out run (with its last stderr lines).
pub fn dump_dom(page: &Path) -> Result<String> {
    let dom = run(page, &["--dump-dom".to_owned()])?;
    if dom.trim().is_empty() {
        bail!("Chromium returned no DOM for {}", page.display());
    }
    Ok(dom)
}

/// Writes a PNG screenshot of the top `width` × `height` CSS px of `page` to `png`.
///
/// # Errors
/// No Chromium (installed on first use, see [`chromium`]), a failed or
/// timed-out run, or no PNG written.
pub fn screenshot(page: &Path, png: &Path, width: u32, height: u32) -> Result<()> {
    let png_abs = std::path::absolute(png).with_context(|| format!("bad path {}", png.display()))?;
    let _ = std::fs::remove_file(&png_abs);
    run(
        page,
        &[
            format!("--screenshot={}", png_abs.display()),
            format!("--window-size={width},{height}"),
        ],
    )?;
    let bytes = std::fs::read(&png_abs).with_context(|| format!("Chromium wrote no screenshot {}", png.display()))?;
    if !bytes.starts_with(b"\x89PNG") {
        bail!("{} is not a PNG", png.display());
    }
    Ok(())
}
