// The crate versions the columns report come from the workspace's Cargo.lock
// (src/versions.rs). Built inside the locklab workspace, its Cargo.lock is
// copied into OUT_DIR; built from a package (no workspace around it), an empty
// file stands in, and the versions are read at run time instead.
fn main() {
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let lock = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.lock");
    println!("cargo:rerun-if-changed=../Cargo.lock");
    let text = std::fs::read_to_string(&lock).unwrap_or_default();
    std::fs::write(out.join("Cargo.lock"), text).expect("OUT_DIR is writable");
}
