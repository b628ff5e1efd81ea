//! `include/sode.h` is what cbindgen makes of the crate today: a change to
//! the ABI that was not regenerated fails here (and so in CI). Regenerate
//! with `SODE_BLESS=1 cargo test -p sode-capi --test header`.

use std::path::Path;

#[test]
fn the_checked_in_header_is_up_to_date() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen parses the crate")
        .write(&mut generated);
    let path = dir.join("include/sode.h");
    if std::env::var_os("SODE_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write include/sode.h");
    }
    let checked_in = std::fs::read(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} is out of date: run `SODE_BLESS=1 cargo test -p sode-capi --test header` and commit it",
        path.display()
    );
}
