//! Process memory readings for benchmarks and the settings screen.

/// Peak resident set size of this process in bytes (VmHWM), where the OS reports it.
pub fn peak_rss_bytes() -> Option<u64> {
    status_field("VmHWM:")
}

/// Current resident set size in bytes (VmRSS).
pub fn current_rss_bytes() -> Option<u64> {
    status_field("VmRSS:")
}

/// Reads a "kB" field of /proc/self/status (Linux and Android).
fn status_field(name: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_kb_field(&status, name)
}

fn parse_kb_field(status: &str, name: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(name))?;
    let kb: u64 = line[name.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kb.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kb_fields() {
        let s = "Name:\tx\nVmHWM:\t  12345 kB\nVmRSS:\t 100 kB\n";
        assert_eq!(parse_kb_field(s, "VmHWM:"), Some(12345 * 1024));
        assert_eq!(parse_kb_field(s, "VmRSS:"), Some(100 * 1024));
        assert_eq!(parse_kb_field(s, "VmSwap:"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn peak_covers_a_large_touched_allocation() {
        let before = peak_rss_bytes().unwrap();
        let v = vec![1u8; 64 << 20];
        assert!(v.iter().step_by(4096).all(|&b| b == 1));
        let after = peak_rss_bytes().unwrap();
        assert!(after >= before && after >= 64 << 20, "{before} {after}");
    }
}
