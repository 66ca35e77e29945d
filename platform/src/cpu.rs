//! Which cores the kernels should run on by default: the performance cores.
//!
//! Phones mix fast and slow cores (for example one prime, three big and four little). Decode
//! splits each matrix over the worker threads and waits for the last one, so a worker on a
//! little core holds every token back, and little cores add next to nothing to the memory
//! bandwidth that decode is bound by. The default thread count is therefore the number of
//! cores whose top speed is close to the fastest core's.
//!
//! On Linux and Android each core's top speed is read from sysfs: `cpu_capacity` (arm64's
//! scheduler scale, 1024 for the fastest core) where the kernel has it, else
//! `cpufreq/cpuinfo_max_freq`. Where neither is readable (other systems, some containers and
//! virtual machines) every core the process may use counts.

use std::path::Path;

/// A core counts as a performance core when its top speed is at least this share of the
/// fastest core's. Prime and big cores sit at 85-100% of the fastest; little cores at 30-65%.
const PERFORMANCE_SHARE: f64 = 0.75;

/// The number of performance cores this process may use, at least 1.
pub fn performance_cores() -> usize {
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    performance_cores_in(Path::new("/sys/devices/system/cpu"), available)
}

/// [`performance_cores`] reading the sysfs cpu directory at `root`, for a process that may use
/// `available` cores.
pub fn performance_cores_in(root: &Path, available: usize) -> usize {
    let available = available.max(1);
    let Some(online) = std::fs::read_to_string(root.join("online"))
        .ok()
        .and_then(|s| parse_cpu_list(&s))
    else {
        return available;
    };
    // Capacities where the kernel publishes them (then every core has one), else frequencies.
    let file = if root
        .join(format!("cpu{}", online[0]))
        .join("cpu_capacity")
        .exists()
    {
        "cpu_capacity"
    } else {
        "cpufreq/cpuinfo_max_freq"
    };
    let speeds: Vec<Option<u64>> = online
        .iter()
        .map(|&cpu| read_number(&root.join(format!("cpu{cpu}")).join(file)))
        .collect();
    count_performance(&speeds).map_or(available, |n| n.min(available))
}

/// Cores whose speed is at least [`PERFORMANCE_SHARE`] of the fastest; `None` unless every
/// core's speed is known and positive (a partial view could count the wrong cores).
fn count_performance(speeds: &[Option<u64>]) -> Option<usize> {
    let speeds: Vec<u64> = speeds.iter().copied().collect::<Option<_>>()?;
    let fastest = *speeds.iter().max()?;
    if fastest == 0 {
        return None;
    }
    // The fastest core always counts, so this is at least 1.
    Some(
        speeds
            .iter()
            .filter(|&&s| s as f64 >= PERFORMANCE_SHARE * fastest as f64)
            .count(),
    )
}

/// A file holding one unsigned number, as sysfs writes them.
fn read_number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The kernel's cpu list format: "0-3,5,7-8".
fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if a > b || b - a > 4096 {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.trim().parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A fake sysfs cpu directory: `online`, and per core either a capacity or a max frequency.
    fn sysfs(name: &str, online: &str, cores: &[(usize, &str, u64)]) -> PathBuf {
        let root = std::env::temp_dir().join(format!("kostant-cpu-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("online"), online).unwrap();
        for &(cpu, file, value) in cores {
            let path = root.join(format!("cpu{cpu}")).join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, format!("{value}\n")).unwrap();
        }
        root
    }

    #[test]
    fn a_phone_with_prime_big_and_little_cores_counts_prime_and_big() {
        // 1 prime at 3.19 GHz, 3 big at 2.8 GHz, 4 little at 2.0 GHz (frequencies in kHz).
        let mut cores = vec![(7, "cpufreq/cpuinfo_max_freq", 3_187_200)];
        cores.extend((4..7).map(|c| (c, "cpufreq/cpuinfo_max_freq", 2_803_200)));
        cores.extend((0..4).map(|c| (c, "cpufreq/cpuinfo_max_freq", 2_016_000)));
        let root = sysfs("phone", "0-7\n", &cores);
        assert_eq!(performance_cores_in(&root, 8), 4);
        // A process allowed fewer cores gets no more threads than it may use.
        assert_eq!(performance_cores_in(&root, 2), 2);
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn arm64_capacities_are_preferred_to_frequencies() {
        // Capacities say 2 fast cores; the frequencies (all equal) would say 4.
        let mut cores: Vec<(usize, &str, u64)> = vec![
            (0, "cpu_capacity", 1024),
            (1, "cpu_capacity", 1024),
            (2, "cpu_capacity", 446),
            (3, "cpu_capacity", 446),
        ];
        cores.extend((0..4).map(|c| (c, "cpufreq/cpuinfo_max_freq", 2_000_000)));
        let root = sysfs("capacity", "0-3", &cores);
        assert_eq!(performance_cores_in(&root, 4), 2);
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn equal_cores_all_count_and_unknown_speeds_fall_back_to_every_core() {
        let cores: Vec<(usize, &str, u64)> = (0..4)
            .map(|c| (c, "cpufreq/cpuinfo_max_freq", 2_400_000))
            .collect();
        let root = sysfs("equal", "0-3", &cores);
        assert_eq!(performance_cores_in(&root, 4), 4);
        let _ = std::fs::remove_dir_all(root);

        // One core's speed missing: the view is partial, so every available core counts.
        let root = sysfs("partial", "0-3", &cores[..3]);
        assert_eq!(performance_cores_in(&root, 4), 4);
        let _ = std::fs::remove_dir_all(root);

        // No sysfs at all (another system, a sandbox).
        let missing = std::env::temp_dir().join("kostant-cpu-no-such-dir");
        assert_eq!(performance_cores_in(&missing, 3), 3);
        assert_eq!(performance_cores_in(&missing, 0), 1);
    }

    #[test]
    fn cpu_lists_parse_and_garbage_is_refused() {
        assert_eq!(
            parse_cpu_list("0-3,5,7-8\n"),
            Some(vec![0, 1, 2, 3, 5, 7, 8])
        );
        assert_eq!(parse_cpu_list("4"), Some(vec![4]));
        for bad in ["", "\n", "3-1", "a-b", "0-99999999", "1,x"] {
            assert_eq!(parse_cpu_list(bad), None, "{bad:?}");
        }
    }

    /// On this machine, whatever it is: at least one core, no more than the process may use.
    #[test]
    fn this_machine_has_between_one_and_every_available_core() {
        let n = performance_cores();
        let available = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!((1..=available).contains(&n), "{n} of {available}");
    }
}
