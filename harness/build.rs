// The scenario × driver tests are generated from the files in scenarios/ when
// the tests are compiled (rstest `#[files]`): rebuild when that directory changes,
// so a new, renamed or deleted scenario is picked up by the next `cargo test`.
fn main() {
    println!("cargo:rerun-if-changed=../scenarios");
    println!("cargo:rerun-if-changed=tests/fixtures");
}
