//! The environment variables sode reads, and a word for a variable named
//! like one that is not (`SODE_TIMOUT=30`, `sode_transport=tcp`): it has
//! no effect, and a user who set it believes otherwise.

use std::sync::Once;

/// Every environment variable of sode's, in every crate and in
/// `libsode_mpi` (a test checks the sources against this list).
pub const SETTINGS: &[&str] = &[
    "SODE_DEVICE",
    "SODE_DIAL_TEST_WITHOUT_DESCRIPTORS",
    "SODE_GID_INDEX",
    "SODE_GROUPS",
    "SODE_HEALTH_TIMEOUT",
    "SODE_JOB_ID",
    "SODE_JOB_SECRET",
    "SODE_LOCAL_RANK",
    "SODE_LOG",
    "SODE_MAX_CONNECTIONS",
    "SODE_NO_DIRECT",
    "SODE_PORT",
    "SODE_PROGRESS",
    "SODE_RANK",
    "SODE_REQUIRE_RDMA",
    "SODE_ROOT",
    "SODE_SHM_DIR",
    "SODE_SHM_EAGER_MAX",
    "SODE_SHM_GET_MIN",
    "SODE_SHM_PROBE_CACHE",
    "SODE_SHM_READ_MIN",
    "SODE_SHM_READ_RUN_MIN",
    "SODE_SIZE",
    "SODE_TCP_ADDR",
    "SODE_TCP_PORTS",
    "SODE_TIMEOUT",
    "SODE_TRACE",
    "SODE_TRANSPORT",
    "SODE_WAIT",
    "SODE_WAIT_WARN",
    "SODE_ZERO_COPY",
];

/// A variable set that looks like a setting of sode's but is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Misspelt {
    /// The variable as set.
    pub name: String,
    /// The setting it most likely meant.
    pub meant: &'static str,
}

/// Of the variables `names`, those that look like one of [`SETTINGS`]
/// without being it: the same in upper case, or at most two letters away
/// (one for short names) from exactly one nearest setting. Other `SODE_`
/// names (a script's own) are left alone.
pub fn misspelt(names: impl IntoIterator<Item = String>) -> Vec<Misspelt> {
    names
        .into_iter()
        .filter(|n| n.to_ascii_uppercase().starts_with("SODE_") && !SETTINGS.contains(&n.as_str()))
        .filter_map(|name| {
            let upper = name.to_ascii_uppercase();
            let suffix = &upper["SODE_".len()..];
            let allowed = if suffix.len() < 6 { 1 } else { 2 };
            let near = SETTINGS
                .iter()
                .map(|s| (distance(&upper, s), *s))
                .filter(|(d, _)| *d <= allowed);
            let (d, meant) = near.clone().min()?;
            // Two settings equally near: no guess is better than a wrong one.
            let tied = near.filter(|(e, _)| *e == d).count() > 1;
            (!tied).then_some(Misspelt { name, meant })
        })
        .collect()
}

/// Edits (a letter changed, added or removed) between `a` and `b`.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != cb))
                .min(above + 1)
                .min(row[j] + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Warns, once per process, of each variable in this process's environment
/// that looks like a setting of sode's but is none.
pub(crate) fn warn_misspelt() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let names = std::env::vars_os().filter_map(|(k, _)| k.into_string().ok());
        for m in misspelt(names) {
            tracing::warn!(
                "{} is set but is not a setting of sode's, and has no effect: did you mean {}?",
                m.name,
                m.meant
            );
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guesses(names: &[&str]) -> Vec<(String, &'static str)> {
        misspelt(names.iter().map(|n| n.to_string()))
            .into_iter()
            .map(|m| (m.name, m.meant))
            .collect()
    }

    #[test]
    fn a_misspelt_setting_is_named_with_the_one_meant() {
        assert_eq!(
            guesses(&[
                "SODE_TIMOUT",
                "SODE_TRANPORT",
                "sode_transport",
                "SODE_HEALTH_TIMEOT",
                "SODE_WAITWARN",
                "SODE_SHM_READMIN",
            ]),
            vec![
                ("SODE_TIMOUT".into(), "SODE_TIMEOUT"),
                ("SODE_TRANPORT".into(), "SODE_TRANSPORT"),
                ("sode_transport".into(), "SODE_TRANSPORT"),
                ("SODE_HEALTH_TIMEOT".into(), "SODE_HEALTH_TIMEOUT"),
                ("SODE_WAITWARN".into(), "SODE_WAIT_WARN"),
                ("SODE_SHM_READMIN".into(), "SODE_SHM_READ_MIN"),
            ]
        );
    }

    #[test]
    fn settings_and_names_far_from_any_are_left_alone() {
        let mut names: Vec<&str> = SETTINGS.to_vec();
        // A script's own names, and names of other libraries.
        names.extend([
            "SODE_PREFIX",
            "SODE_RUN",
            "SODE_KILLS_SEED",
            "SODE_BOX",
            "UCX_TLS",
            "PATH",
        ]);
        assert_eq!(guesses(&names), vec![]);
    }

    #[test]
    fn the_list_holds_every_variable_the_sources_read() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let dirs = [
            "job/src",
            "halo/src",
            "shm/src",
            "transport/src",
            "capi/src",
            "capi/mpi",
            "capi/fortran",
            "scheduler/src",
        ];
        let mut found = std::collections::BTreeSet::new();
        let mut stack: Vec<_> = dirs.iter().map(|d| root.join(d)).collect();
        while let Some(p) = stack.pop() {
            if p.is_dir() {
                stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
                continue;
            }
            // This file names them all, and misspells some.
            if p.ends_with("job/src/settings.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            // Every string that is a whole name: `"SODE_..."`.
            for (at, _) in text.match_indices("\"SODE_") {
                let rest = &text[at + 1..];
                let Some(end) = rest.find('"') else { continue };
                let piece = &rest[..end];
                let is_name = piece.len() > "SODE_".len()
                    && !piece.ends_with('_')
                    && piece
                        .bytes()
                        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
                // Status names (sode_strerror's) are not variables.
                if is_name && !piece.starts_with("SODE_ERR_") && piece != "SODE_OK" {
                    found.insert(piece.to_string());
                }
            }
        }
        let listed: std::collections::BTreeSet<String> =
            SETTINGS.iter().map(|s| s.to_string()).collect();
        assert_eq!(found, listed, "variables in the sources against SETTINGS");
    }
}
