//! Criterion benches of collsim: `cargo bench` at the repository root runs them (this package
//! exists so that `cargo test` does not build criterion). Each bench reads the repository's
//! files through [`repo`].

/// `path`, relative to the repository root, whatever directory the bench runs in.
pub fn repo(path: &str) -> String {
    format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"))
}
