//! Facts about this node: capacity (CPU, memory) as the kubelet reports it.

use std::sync::OnceLock;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// Online CPUs (respecting affinity/cgroup limits), in millicores.
    pub cpu_millis: i64,
    /// MemTotal from /proc/meminfo, in bytes.
    pub memory_bytes: i64,
}

/// MemTotal in KiB from the text of /proc/meminfo.
pub fn parse_mem_total_kib(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        l.strip_prefix("MemTotal:")?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    })
}

/// The node's capacity, read once.
pub fn capacity() -> Capacity {
    static CAP: OnceLock<Capacity> = OnceLock::new();
    *CAP.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as i64;
        let kib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| parse_mem_total_kib(&s))
            .unwrap_or(0);
        Capacity {
            cpu_millis: cpus * 1000,
            memory_bytes: (kib as i64).saturating_mul(1024),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_total_is_parsed_in_kib() {
        assert_eq!(
            parse_mem_total_kib("MemTotal:       24570848 kB\nMemFree: 1 kB\n"),
            Some(24_570_848)
        );
        assert_eq!(parse_mem_total_kib("nothing"), None);
        let c = capacity();
        assert!(c.cpu_millis >= 1000 && c.memory_bytes > 0);
    }
}
