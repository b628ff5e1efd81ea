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

/// A user's own `MAX_RUNS` or `comm` must never meet one of sode's: every
/// macro, type and function the header defines is prefixed.
#[test]
fn every_name_in_the_header_is_prefixed() {
    let header =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("include/sode.h"))
            .expect("include/sode.h");
    let mut names = Vec::new();
    let code = header
        .lines()
        .map(str::trim_start)
        .filter(|l| !(l.starts_with('*') || l.starts_with("/*") || l.starts_with("//")));
    for line in code {
        if let Some(rest) = line.strip_prefix("#define ") {
            names.push(
                rest.split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string(),
            );
        } else if let Some(rest) = line.strip_prefix("typedef struct ") {
            names.extend(
                rest.split([' ', ';'])
                    .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_alphanumeric() || c == '_'))
                    .map(String::from),
            );
        } else if let Some(open) = line.find('(') {
            // A declaration `int sode_x(...` or `typedef int (*sode_f)(...`.
            let before = line[..open].trim_end();
            if line.starts_with("typedef")
                || before.ends_with(|c: char| c.is_alphanumeric() || c == '_')
            {
                if let Some(name) = before.rsplit([' ', '*', '(']).next() {
                    if !name.is_empty() && !line.starts_with("typedef") {
                        names.push(name.to_string());
                    }
                }
            }
            if line.starts_with("typedef") {
                if let Some(name) = line.split("(*").nth(1).and_then(|r| r.split(')').next()) {
                    names.push(name.to_string());
                }
            }
        }
    }
    assert!(
        names.iter().any(|n| n == "sode_exchange_wait"),
        "the scan found no functions: {names:?}"
    );
    assert!(
        names.iter().any(|n| n == "SODE_OK"),
        "the scan found no macros: {names:?}"
    );
    let unprefixed: Vec<_> = names
        .iter()
        .filter(|n| !(n.starts_with("sode_") || n.starts_with("SODE_") || n.as_str() == "SODE_H"))
        .collect();
    assert!(
        unprefixed.is_empty(),
        "names in sode.h without the sode_/SODE_ prefix: {unprefixed:?}"
    );
}
