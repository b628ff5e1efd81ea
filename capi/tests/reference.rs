//! `docs/reference-c.md` and `docs/reference-fortran.md` are generated from
//! `include/sode.h` and `fortran/sode.f90`: a documentation change that was
//! not regenerated fails here (and so in CI). Regenerate with
//! `SODE_BLESS=1 cargo test -p sode-capi --test reference`.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One documented item: its name, its declaration and its comment.
struct Item {
    name: String,
    declaration: String,
    doc: Vec<String>,
}

/// The header's functions and macros, each with the comment above it.
fn c_items(header: &str) -> (Vec<Item>, Vec<Item>) {
    let (mut functions, mut constants) = (Vec::new(), Vec::new());
    let mut doc: Vec<String> = Vec::new();
    let mut in_comment = false;
    let mut declaration = String::new();
    for line in header.lines() {
        let t = line.trim();
        // `/** ... */` (cbindgen's) or `/* ... */` (sode_mpi.h's).
        if let Some(first) = t.strip_prefix("/**").or_else(|| t.strip_prefix("/*")) {
            in_comment = !t.ends_with("*/");
            doc.clear();
            let first = first.trim_end_matches("*/").trim();
            if !first.is_empty() {
                doc.push(first.to_string());
            }
            continue;
        }
        if in_comment {
            in_comment = !t.ends_with("*/");
            let text = t.trim_end_matches("*/").trim_start_matches('*');
            if !(t.starts_with("*/")) {
                doc.push(
                    text.strip_prefix(' ')
                        .unwrap_or(text)
                        .trim_end()
                        .to_string(),
                );
            }
            continue;
        }
        if let Some(rest) = t.strip_prefix("#define SODE_") {
            let mut words = rest.split_whitespace();
            let name = format!("SODE_{}", words.next().unwrap_or_default());
            if let Some(value) = words.next() {
                constants.push(Item {
                    name,
                    declaration: value.to_string(),
                    doc: std::mem::take(&mut doc),
                });
            }
            continue;
        }
        let starts = ["int sode_", "const char *sode_", "void sode_"]
            .iter()
            .any(|p| t.starts_with(p));
        if starts || !declaration.is_empty() {
            declaration.push_str(if declaration.is_empty() { "" } else { "\n" });
            declaration.push_str(line);
            if t.ends_with(';') {
                let name = declaration
                    .split('(')
                    .next()
                    .and_then(|s| s.rsplit([' ', '*']).next())
                    .unwrap_or_default()
                    .to_string();
                functions.push(Item {
                    name,
                    declaration: std::mem::take(&mut declaration),
                    doc: std::mem::take(&mut doc),
                });
            }
        } else if !t.is_empty() {
            doc.clear();
        }
    }
    (functions, constants)
}

/// The doc lines as Markdown: `# Safety` becomes a bold paragraph.
fn prose(doc: &[String]) -> String {
    let mut out = String::new();
    for line in doc {
        let line = match line.strip_prefix("# ") {
            Some(h) => format!("**{h}.**"),
            None => line.clone(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out.trim_end().to_string()
}

fn c_reference(header: &str, mpi_header: &str) -> String {
    let (functions, constants) = c_items(header);
    let (mpi_functions, _) = c_items(mpi_header);
    let mut out = String::from(
        "# C reference\n\n\
         Generated from `capi/include/sode.h` (itself generated from `capi/src`) by\n\
         `SODE_BLESS=1 cargo test -p sode-capi --test reference`; do not edit.\n\n\
         Every function returns a status: `SODE_OK` (0) or one of the `SODE_ERR_*`\n\
         codes below, and leaves a message for `sode_last_error()` on the calling\n\
         thread (empty after success). `SODE_ERR_NULL`: a required pointer was null;\n\
         `SODE_ERR_ARG`: an argument was invalid; `SODE_ERR_STATE`: the call came in\n\
         the wrong state. Each function's **Statuses** name the codes it returns\n\
         besides `SODE_OK`, and when; any call may also return `SODE_ERR_INTERNAL`\n\
         (a bug in sode, caught at the boundary: please report it with its\n\
         message). Calls on one communicator and its exchanges must not\n\
         overlap (one thread at a time); `sode_version`, `sode_strerror` and\n\
         `sode_abi_version` may be called from any thread. Collective calls\n\
         (`sode_comm_create_*`, `sode_exchange_commit`) fail on every rank alike.\n\n\
         Include `<sode.h>`, or `<sode_mpi.h>` for the MPI communicators (in\n\
         `libsode_mpi`, at the end).\n\n## Functions\n",
    );
    let section = |out: &mut String, items: &[Item]| {
        for f in items {
            out.push_str(&format!(
                "\n### `{}`\n\n```c\n{}\n```\n\n{}\n",
                f.name,
                f.declaration,
                prose(&f.doc)
            ));
        }
    };
    section(&mut out, &functions);
    out.push_str("\n## MPI communicators (`sode_mpi.h`, `libsode_mpi`)\n");
    section(&mut out, &mpi_functions);
    out.push_str("\n## Constants\n\n| name | value | meaning |\n|---|---|---|\n");
    for c in &constants {
        let meaning = c.doc.join(" ").replace('|', "\\|");
        out.push_str(&format!(
            "| `{}` | `{}` | {} |\n",
            c.name,
            c.declaration,
            meaning.trim()
        ));
    }
    out
}

/// Marks a procedure that takes `ierr` among the words of its body.
const IERR: &str = " ierr";

type Words = std::collections::BTreeMap<String, std::collections::BTreeSet<String>>;

/// Each interface name of the module and the C function it binds.
fn c_bindings(joined: &str) -> std::collections::BTreeMap<String, String> {
    let mut binds = std::collections::BTreeMap::new();
    for line in joined.lines() {
        let t = line.trim();
        if let (Some(f), Some(at)) = (t.strip_prefix("function "), t.find("bind(C, name=\"")) {
            let name = f.split('(').next().unwrap_or_default().trim().to_string();
            let c = t[at + 14..].split('"').next().unwrap_or_default();
            binds.insert(name, c.to_string());
        }
    }
    binds
}

/// Each procedure's body as the words of its code (no comment, no string:
/// `fortran_names` lists every routine's name in strings), with [`IERR`]
/// for one that takes `ierr`; a generic interface's are its procedures.
fn procedure_words(module: &str) -> Words {
    let joined = module.replace("&\n", " ");
    let mut bodies = Words::new();
    let mut current: Option<String> = None;
    let heads = [
        "subroutine ",
        "function ",
        "integer function ",
        "integer(c_int) function ",
    ];
    for line in joined.lines() {
        let t = line.trim();
        if t.starts_with("end subroutine") || t.starts_with("end function") {
            current = None;
            continue;
        }
        let head = heads.iter().find_map(|p| t.strip_prefix(p));
        if let (None, Some(h)) = (&current, head) {
            if !t.contains("bind(C") {
                let name = h.split('(').next().unwrap_or_default().trim().to_string();
                let args = h.split(['(', ')']).nth(1).unwrap_or_default();
                if args.split(',').any(|a| a.trim() == "ierr") {
                    bodies.entry(name.clone()).or_default().insert(IERR.into());
                }
                current = Some(name);
                continue;
            }
        }
        if let Some(name) = &current {
            let code = t.split('!').next().unwrap_or_default();
            let code: Vec<&str> = code.split(['\'', '"']).step_by(2).collect();
            let words = code
                .join(" ")
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| !w.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>();
            bodies.entry(name.clone()).or_default().extend(words);
        }
    }
    let mut generic: Option<String> = None;
    for line in module.lines() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix("interface sode_") {
            generic = Some(format!("sode_{}", name.trim()));
        } else if t.starts_with("end interface") {
            generic = None;
        } else if let (Some(g), Some(list)) = (&generic, t.strip_prefix("module procedure ")) {
            let used = list.split(',').map(|w| w.trim().to_string());
            bodies.entry(g.clone()).or_default().extend(used);
        }
    }
    bodies
}

/// The C functions each of the module's procedures that take `ierr`
/// calls, directly or through the module's other procedures: the statuses
/// its `ierr` can receive are theirs.
fn c_calls(module: &str) -> Words {
    let binds = c_bindings(&module.replace("&\n", " "));
    let bodies = procedure_words(module);
    let takes_ierr = |name: &String| {
        bodies[name].contains(IERR)
            || bodies[name]
                .iter()
                .any(|w| bodies.get(w).is_some_and(|m| m.contains(IERR)))
    };
    let mut calls = Words::new();
    for name in bodies.keys().filter(|n| takes_ierr(n)) {
        let (mut seen, mut todo) = (std::collections::BTreeSet::new(), vec![name.clone()]);
        let mut c = std::collections::BTreeSet::new();
        while let Some(n) = todo.pop() {
            if !seen.insert(n.clone()) {
                continue;
            }
            for w in bodies.get(&n).into_iter().flatten() {
                if let Some(f) = binds.get(w) {
                    c.insert(f.clone());
                } else if bodies.contains_key(w) {
                    todo.push(w.clone());
                }
            }
        }
        // Reporting the module's own failures, and ending the job, are no
        // statuses of their own.
        let own = [
            "sode_report_error",
            "sode_last_error",
            "sode_mpi_abort",
            "sode_strerror",
        ];
        c.retain(|f| f.starts_with("sode_") && !own.contains(&f.as_str()));
        calls.insert(name.clone(), c);
    }
    calls
}

/// Whether generic interface `name` of the module gathers functions (its
/// first procedure is one), which are called in expressions, not with `call`.
fn generic_function(module: &str, name: &str) -> bool {
    let first = module
        .split(&format!("interface {name}\n"))
        .nth(1)
        .and_then(|rest| rest.trim_start().strip_prefix("module procedure "))
        .and_then(|list| list.split([',', '\n']).next())
        .map(|p| p.trim().to_string());
    first.is_some_and(|p| {
        module
            .lines()
            .any(|l| l.trim().starts_with(&format!("function {p}(")))
    })
}

/// The module's public procedures and interfaces, each with its `!>`
/// comment.
fn fortran_reference(module: &str) -> String {
    let calls = c_calls(module);
    let mut out = String::from(
        "# Fortran reference\n\n\
         Generated from `capi/fortran/sode.f90` by\n\
         `SODE_BLESS=1 cargo test -p sode-capi --test reference`; do not edit.\n\n\
         `use sode`. Every call takes an optional `integer, intent(out) :: ierr`\n\
         after its required arguments: given, it receives the status (`SODE_OK`\n\
         or a `SODE_ERR_*` code, as in C) and the caller decides; absent, a failure\n\
         prints sode's message and ends the job through `MPI_Abort` with the\n\
         status. Timeouts and halo widths are optional keyword arguments after\n\
         `ierr`. The thread rules are C's ([C reference](reference-c.md)).\n\n\
         Codes on `mpi_f08` write `use sode_f08` (`capi/fortran/sode_f08.f90`,\n\
         built where the MPI has `mpi_f08`): the same module, whose\n\
         `sode_comm_create_mpi` and `sode_exchange_create_mpi_cart` take a\n\
         `type(MPI_Comm)` as well as an integer handle.\n\n## Procedures\n",
    );
    let mut doc: Vec<String> = Vec::new();
    let mut contains = false;
    for line in module.lines() {
        let t = line.trim();
        if t == "contains" {
            contains = true;
        }
        if let Some(d) = t.strip_prefix("!>") {
            doc.push(d.strip_prefix(' ').unwrap_or(d).to_string());
            continue;
        }
        let head = t
            .strip_prefix("subroutine ")
            .or_else(|| t.strip_prefix("function "))
            .or_else(|| t.strip_prefix("integer function "))
            .or_else(|| t.strip_prefix("interface "));
        match head {
            Some(h) if h.starts_with("sode_") && (contains || t.starts_with("interface")) => {
                let name = h.split(['(', ' ']).next().unwrap_or(h);
                let signature = if t.starts_with("interface") && generic_function(module, name) {
                    format!("generic function: {name}(...)")
                } else if t.starts_with("interface") {
                    format!("generic: call {name}(...)")
                } else {
                    t.to_string()
                };
                out.push_str(&format!(
                    "\n### `{name}`\n\n```fortran\n{signature}\n```\n\n{}\n",
                    doc.join("\n")
                ));
                let c: Vec<String> = calls
                    .get(name)
                    .into_iter()
                    .flatten()
                    .map(|f| format!("`{f}`"))
                    .collect();
                if !c.is_empty() {
                    out.push_str(&format!(
                        "\n**Statuses** (`ierr`): those of {} in the C reference.\n",
                        c.join(", ")
                    ));
                }
                doc.clear();
            }
            _ => {
                if !t.is_empty() {
                    doc.clear();
                }
            }
        }
    }
    out
}

fn check(path: &Path, generated: &str) {
    if std::env::var_os("SODE_BLESS").is_some() {
        std::fs::write(path, generated).expect("write the reference");
    }
    let checked_in = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} is out of date: run `SODE_BLESS=1 cargo test -p sode-capi --test reference` and commit it",
        path.display()
    );
}

#[test]
fn the_c_reference_is_up_to_date() {
    let header = std::fs::read_to_string(repo().join("capi/include/sode.h")).unwrap();
    let mpi_header = std::fs::read_to_string(repo().join("capi/mpi/sode_mpi.h")).unwrap();
    let reference = c_reference(&header, &mpi_header);
    for name in [
        "sode_exchange_wait",
        "sode_strerror",
        "sode_comm_create_env",
        "sode_exchange_add_field_strided",
        "sode_comm_create_mpi",
        "sode_mpi_abort",
    ] {
        assert!(
            reference.contains(&format!("### `{name}`")),
            "{name} missing"
        );
    }
    assert!(reference.contains("| `SODE_ERR_TIMEOUT` | `4` |"));
    // Every call that returns a status says which, and when.
    let (functions, _) = c_items(&header);
    let (mpi_functions, _) = c_items(&mpi_header);
    for f in functions.iter().chain(&mpi_functions) {
        let returns_status =
            f.declaration.trim_start().starts_with("int ") && f.name != "sode_abi_version";
        assert!(
            !returns_status || f.doc.iter().any(|l| l == "# Statuses"),
            "{} does not say which statuses it returns (a `# Statuses` section)",
            f.name
        );
    }
    check(&repo().join("docs/reference-c.md"), &reference);
}

#[test]
fn the_fortran_reference_is_up_to_date() {
    let module = std::fs::read_to_string(repo().join("capi/fortran/sode.f90")).unwrap();
    let reference = fortran_reference(&module);
    for name in [
        "sode_wait",
        "sode_add_field",
        "sode_strerror",
        "sode_start_arrays",
    ] {
        assert!(
            reference.contains(&format!("### `{name}`")),
            "{name} missing"
        );
    }
    // Each routine's statuses are those of the C functions it calls.
    for (routine, c) in [
        ("sode_wait", "`sode_exchange_wait`"),
        ("sode_add_field", "`sode_exchange_add_field_f`"),
        ("sode_comm_reorder_cart", "`sode_comm_reorder_cart`"),
        ("sode_start_set", "`sode_exchange_start_set`"),
    ] {
        let section = reference
            .split(&format!("### `{routine}`"))
            .nth(1)
            .and_then(|s| s.split("\n### ").next())
            .unwrap_or_default();
        assert!(
            section.contains(&format!(
                "**Statuses** (`ierr`): those of {c} in the C reference"
            )),
            "{routine}: {section}"
        );
    }
    check(&repo().join("docs/reference-fortran.md"), &reference);
}
