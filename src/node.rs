//! Facts about this node: capacity (CPU, memory) as the kubelet reports it, and its primary IP.

use std::net::{IpAddr, Ipv4Addr};
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
    parse_meminfo_kib(meminfo, "MemTotal")
}

/// The value of `key` (`MemTotal`, `SwapTotal`) in KiB from the text of /proc/meminfo.
pub fn parse_meminfo_kib(meminfo: &str, key: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        l.strip_prefix(key)?
            .strip_prefix(':')?
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

/// The node's primary IPv4 address: the address of the interface carrying the default route,
/// else the first non-loopback IPv4 address, else 127.0.0.1.
pub fn detect_host_ip() -> IpAddr {
    let default_iface = std::fs::read_to_string("/proc/net/route")
        .ok()
        .and_then(|s| {
            s.lines().skip(1).find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() > 2 && f[1] == "00000000").then(|| f[0].to_string())
            })
        });
    let mut first: Option<IpAddr> = None;
    if let Ok(addrs) = nix::ifaddrs::getifaddrs() {
        for a in addrs {
            let Some(ip) = a
                .address
                .as_ref()
                .and_then(|s| s.as_sockaddr_in())
                .map(|s| IpAddr::V4(s.ip()))
            else {
                continue;
            };
            if ip.is_loopback() {
                continue;
            }
            if default_iface.as_deref() == Some(a.interface_name.as_str()) {
                return ip;
            }
            first.get_or_insert(ip);
        }
    }
    first.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
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
