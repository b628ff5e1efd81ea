//! The CPUs a node's ranks may run on, which decides whether their waits
//! spin (`SODE_WAIT=auto`): not the CPUs the node has, but those the ranks'
//! affinities allow together, and no more than the CPU time their control
//! group grants (cgroup v2 or v1). A job given 2 CPUs of a 64-CPU node (a
//! shared Slurm node, a container) that runs 4 ranks there, or 2 ranks a
//! launcher bound to one core, has more ranks than CPUs, and a rank that
//! spins holds the CPU the rank it waits for needs.

use std::path::{Path, PathBuf};

use nix::sched::{sched_getaffinity, CpuSet};
use nix::unistd::Pid;

/// The CPUs the processes `pids` (a node's ranks, this one among them) may
/// run on together: the union of their affinities, capped by this
/// process's control group's CPU quota (cgroup v2 `cpu.max`, or v1
/// `cpu.cfs_quota_us`, whole CPUs). `None` when an affinity cannot be read
/// (a process gone, or in another PID namespace): the caller then counts
/// the node's CPUs.
pub fn cpus_for(pids: &[u32]) -> Option<usize> {
    let union = union_of_affinities(pids)?;
    let quota = [cgroup_quota_cpus(&own_cgroup_dir()), v1_quota_cpus()]
        .into_iter()
        .flatten()
        .min();
    Some(quota.map_or(union, |q| union.min(q)).max(1))
}

/// How many CPUs at least one of `pids` may run on.
fn union_of_affinities(pids: &[u32]) -> Option<usize> {
    let sets: Vec<CpuSet> = pids
        .iter()
        .map(|&pid| {
            let pid = i32::try_from(pid).ok()?;
            match sched_getaffinity(Pid::from_raw(pid)) {
                Ok(set) => Some(set),
                Err(e) => {
                    tracing::debug!(pid, error = %e, "a rank's CPU affinity cannot be read");
                    None
                }
            }
        })
        .collect::<Option<_>>()?;
    let cpus = (0..CpuSet::count())
        .filter(|&cpu| sets.iter().any(|s| s.is_set(cpu).unwrap_or(false)))
        .count();
    (cpus > 0).then_some(cpus)
}

/// This process's cgroup v2 directory (`0::/path` in `/proc/self/cgroup`,
/// under `/sys/fs/cgroup`), or `/sys/fs/cgroup` itself where there is none:
/// a process under cgroup v1 alone has no `cpu.max` to read.
fn own_cgroup_dir() -> PathBuf {
    let root = PathBuf::from("/sys/fs/cgroup");
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    match text.lines().find_map(|l| l.strip_prefix("0::")) {
        Some(p) => root.join(p.trim().trim_start_matches('/')),
        None => root,
    }
}

/// The fewest whole CPUs the `cpu.max` of `dir` or of any directory above
/// it, up to `/sys/fs/cgroup`, grants (at least 1), or `None` when none
/// limits it.
fn cgroup_quota_cpus(dir: &Path) -> Option<usize> {
    dir.ancestors()
        .take_while(|d| d.starts_with("/sys/fs/cgroup"))
        .filter_map(|d| std::fs::read_to_string(d.join("cpu.max")).ok())
        .filter_map(|text| quota_cpus(&text))
        .min()
}

/// Whole CPUs a `cpu.max` of `QUOTA PERIOD` grants (`max`: none), at
/// least 1: 1.5 CPUs of time for 2 spinning ranks would stall one of them
/// for the rest of each period.
fn quota_cpus(cpu_max: &str) -> Option<usize> {
    let mut words = cpu_max.split_whitespace();
    let quota: u64 = words.next()?.parse().ok()?;
    let period: u64 = words.next().map_or(Some(100_000), |p| p.parse().ok())?;
    (period > 0).then(|| usize::try_from(quota / period).unwrap_or(usize::MAX).max(1))
}

/// Where cgroup v1 mounts its `cpu` controller (the one with the quota).
const V1_CPU_MOUNTS: [&str; 2] = ["/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"];

/// The fewest whole CPUs a cgroup v1 quota grants this process (RHEL 8's
/// default hierarchy, a container given `--cpus` there), or `None`.
fn v1_quota_cpus() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = v1_cpu_path(&text)?;
    let mount = V1_CPU_MOUNTS.iter().map(Path::new).find(|m| m.is_dir())?;
    v1_quota_under(mount, &path)
}

/// The path of the cgroup whose controllers include `cpu`, in a
/// `/proc/self/cgroup` of lines `ID:CONTROLLERS:PATH`.
fn v1_cpu_path(proc_cgroup: &str) -> Option<String> {
    proc_cgroup.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        controllers
            .split(',')
            .any(|c| c == "cpu")
            .then(|| path.trim().to_string())
    })
}

/// The fewest whole CPUs (at least 1) that `cpu.cfs_quota_us` over
/// `cpu.cfs_period_us` grants in cgroup `path` of the hierarchy mounted at
/// `mount`, or in any cgroup above it (`-1`: no quota). In a container,
/// whose own cgroup is the mount's root, a path of the host's is not
/// there: its nearest existing ancestor is read.
fn v1_quota_under(mount: &Path, path: &str) -> Option<usize> {
    let read = |d: &Path, file: &str| -> Option<i64> {
        std::fs::read_to_string(d.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    mount
        .join(path.trim_start_matches('/'))
        .ancestors()
        .take_while(|d| d.starts_with(mount))
        .filter_map(|d| {
            let (quota, period) = (read(d, "cpu.cfs_quota_us")?, read(d, "cpu.cfs_period_us")?);
            (quota > 0 && period > 0)
                .then(|| usize::try_from(quota / period).unwrap_or(usize::MAX).max(1))
        })
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quota_counts_whole_cpus() {
        assert_eq!(quota_cpus("max 100000\n"), None);
        assert_eq!(quota_cpus("200000 100000\n"), Some(2));
        assert_eq!(quota_cpus("150000 100000"), Some(1));
        assert_eq!(quota_cpus("50000 100000"), Some(1));
        assert_eq!(quota_cpus("400000"), Some(4));
        assert_eq!(quota_cpus("100000 0"), None);
        assert_eq!(quota_cpus("lots"), None);
        assert_eq!(quota_cpus(""), None);
    }

    #[test]
    fn the_quota_is_the_least_of_the_cgroup_and_those_above_it() {
        let dir = std::env::temp_dir().join(format!("sode-cpus-{}", std::process::id()));
        // Outside /sys/fs/cgroup nothing is read.
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        std::fs::write(dir.join("a/cpu.max"), "200000 100000").unwrap();
        assert_eq!(cgroup_quota_cpus(&dir.join("a/b")), None);
        std::fs::remove_dir_all(&dir).unwrap();
        // This process's own: whatever it is, never 0.
        if let Some(q) = cgroup_quota_cpus(&own_cgroup_dir()) {
            assert!(q >= 1);
        }
    }

    #[test]
    fn a_cgroup_v1_quota_is_read_from_the_cpu_controller_and_above() {
        let text = "12:pids:/user.slice\n4:cpu,cpuacct:/slurm/job_7/step_0\n0::/\n";
        assert_eq!(v1_cpu_path(text).as_deref(), Some("/slurm/job_7/step_0"));
        assert_eq!(v1_cpu_path("3:cpuacct:/a\n5:cpuset:/b\n"), None);
        let mount = std::env::temp_dir().join(format!("sode-cpus-v1-{}", std::process::id()));
        let set = |dir: &str, quota: &str, period: &str| {
            let d = mount.join(dir);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("cpu.cfs_quota_us"), quota).unwrap();
            std::fs::write(d.join("cpu.cfs_period_us"), period).unwrap();
        };
        set("", "-1\n", "100000\n");
        set("slurm", "-1\n", "100000\n");
        assert_eq!(v1_quota_under(&mount, "/slurm/job_7/step_0"), None);
        set("slurm/job_7", "300000\n", "100000\n");
        set("slurm/job_7/step_0", "-1\n", "100000\n");
        assert_eq!(v1_quota_under(&mount, "/slurm/job_7/step_0"), Some(3));
        // In a container: the host's path is not there, the root is read.
        set("", "150000\n", "100000\n");
        assert_eq!(v1_quota_under(&mount, "/docker/abc"), Some(1));
        std::fs::remove_dir_all(&mount).unwrap();
    }

    #[test]
    fn ranks_bound_to_one_cpu_have_one_cpu_between_them() {
        let online = crate::backoff::node_cores();
        let me = std::process::id();
        let mine = union_of_affinities(&[me]).unwrap();
        assert!((1..=online).contains(&mine), "{mine} of {online}");
        // Another process bound to the first CPU this one may use.
        let first = sched_getaffinity(Pid::from_raw(0))
            .map(|s| (0..CpuSet::count()).find(|&c| s.is_set(c).unwrap_or(false)))
            .unwrap()
            .unwrap();
        let mut child = std::process::Command::new("taskset")
            .args(["-c", &first.to_string(), "sleep", "20"])
            .spawn()
            .expect("taskset (util-linux)");
        // taskset binds itself, then becomes sleep: wait until it has.
        let pid = child.id();
        let bound = (0..500).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            union_of_affinities(&[pid]) == Some(1)
        });
        assert!(bound, "the child never ran on one CPU");
        assert_eq!(union_of_affinities(&[pid, pid]), Some(1));
        assert_eq!(union_of_affinities(&[pid, me]), Some(mine));
        child.kill().unwrap();
        child.wait().unwrap();
        // A process that is gone: not counted, the caller falls back.
        assert_eq!(union_of_affinities(&[pid]), None);
        assert_eq!(cpus_for(&[me, pid]), None);
    }
}
