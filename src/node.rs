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

/// Whether `ip` may be a node's InternalIP: a global unicast address (Go's
/// `IsGlobalUnicast`, which apimachinery's `ChooseHostInterface` and the kubelet's
/// `validateNodeIP` use): not loopback, link-local, multicast, unspecified or the IPv4
/// broadcast address. The API server refuses loopback and link-local addresses for
/// `nodes/proxy`.
pub fn is_node_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_loopback()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_unspecified()
                || v4.is_broadcast())
        }
        IpAddr::V6(v6) => {
            !(v6.is_loopback()
                || v6.is_multicast()
                || v6.is_unspecified()
                || (v6.segments()[0] & 0xffc0) == 0xfe80)
        }
    }
}

/// One address of a network interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceAddr {
    pub interface: String,
    pub ip: IpAddr,
    /// The interface is up and not a loopback interface.
    pub usable: bool,
}

/// The node IP the kubelet detects without `--node-ip` (`ResolveBindAddress` ->
/// `ChooseHostInterface`, IPv4 preferred): the first global unicast IPv4 address of the
/// interface carrying the IPv4 default route, else the first global unicast IPv6 address of
/// the interface carrying the IPv6 default route; without one (upstream errors out) the first
/// global unicast address of any interface that is up, IPv4 first. Never a loopback or
/// link-local address: `None` when the node has no other.
pub fn choose_host_ip(
    default_v4: Option<&str>,
    default_v6: Option<&str>,
    addrs: &[InterfaceAddr],
) -> Option<IpAddr> {
    let on = |iface: Option<&str>, v4: bool| {
        let iface = iface?;
        addrs
            .iter()
            .find(|a| a.interface == iface && a.ip.is_ipv4() == v4 && is_node_ip(a.ip))
            .map(|a| a.ip)
    };
    let any = |v4: bool| {
        addrs
            .iter()
            .find(|a| a.usable && a.ip.is_ipv4() == v4 && is_node_ip(a.ip))
            .map(|a| a.ip)
    };
    on(default_v4, true)
        .or_else(|| on(default_v6, false))
        .or_else(|| any(true))
        .or_else(|| any(false))
}

/// The interface of the IPv4 default route in /proc/net/route's text.
fn default_route_v4(text: &str) -> Option<String> {
    text.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 2 && f[1] == "00000000").then(|| f[0].to_string())
    })
}

/// The interface of the IPv6 default route (`::/0`) in /proc/net/ipv6_route's text.
fn default_route_v6(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 10 && f[0].bytes().all(|b| b == b'0') && f[1] == "00" && f[9] != "lo")
            .then(|| f[9].to_string())
    })
}

/// The node's primary IP as [`choose_host_ip`] picks it from this host's routes and
/// interfaces; 127.0.0.1 only when the host has no other address (standalone boxes without a
/// network; in API-server mode the wiring warns).
pub fn detect_host_ip() -> IpAddr {
    use nix::net::if_::InterfaceFlags;
    let v4 = std::fs::read_to_string("/proc/net/route")
        .ok()
        .and_then(|s| default_route_v4(&s));
    let v6 = std::fs::read_to_string("/proc/net/ipv6_route")
        .ok()
        .and_then(|s| default_route_v6(&s));
    let mut addrs = Vec::new();
    if let Ok(list) = nix::ifaddrs::getifaddrs() {
        for a in list {
            let Some(sa) = a.address.as_ref() else {
                continue;
            };
            let ip = match (sa.as_sockaddr_in(), sa.as_sockaddr_in6()) {
                (Some(s4), _) => IpAddr::V4(s4.ip()),
                (None, Some(s6)) => IpAddr::V6(s6.ip()),
                _ => continue,
            };
            let usable = a.flags.contains(InterfaceFlags::IFF_UP)
                && !a.flags.contains(InterfaceFlags::IFF_LOOPBACK);
            addrs.push(InterfaceAddr {
                interface: a.interface_name,
                ip,
                usable,
            });
        }
    }
    choose_host_ip(v4.as_deref(), v6.as_deref(), &addrs).unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// apimachinery's ChooseHostInterface (the kubelet's node IP without --node-ip): the
    /// default route's interface, IPv4 first, and only global unicast addresses, so a
    /// link-local (169.254/16, fe80::/10) or loopback address is never the InternalIP when a
    /// real one exists.
    #[test]
    fn the_host_ip_is_a_global_address_of_the_default_route_interface() {
        let a = |iface: &str, ip: &str, usable: bool| InterfaceAddr {
            interface: iface.into(),
            ip: ip.parse().expect("ip"),
            usable,
        };
        let addrs = [
            a("lo", "127.0.0.1", false),
            a("eth0", "169.254.10.1", true),
            a("eth0", "fe80::1", true),
            a("eth0", "192.0.2.5", true),
            a("eth0", "2001:db8::5", true),
            a("wlan0", "198.51.100.7", true),
        ];
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        assert_eq!(
            choose_host_ip(Some("eth0"), None, &addrs),
            Some(ip("192.0.2.5"))
        );
        assert_eq!(
            choose_host_ip(Some("wlan0"), None, &addrs),
            Some(ip("198.51.100.7"))
        );
        // IPv6-only default route.
        assert_eq!(
            choose_host_ip(None, Some("eth0"), &addrs),
            Some(ip("2001:db8::5"))
        );
        // No default route: any interface that is up, IPv4 first, never link-local.
        assert_eq!(
            choose_host_ip(None, None, &addrs[..4]),
            Some(ip("192.0.2.5"))
        );
        // Nothing but loopback and link-local: none (the caller falls back to loopback).
        assert_eq!(choose_host_ip(Some("eth0"), None, &addrs[..3]), None);
        assert_eq!(
            default_route_v4("Iface\tDestination\tGateway\neth0\t00000000\t0102A8C0\n"),
            Some("eth0".into())
        );
        let v6 = "00000000000000000000000000000000 00 00000000000000000000000000000000 00 \
                  fe800000000000000000000000000001 00000400 00000001 00000000 00000003 eth0\n";
        assert_eq!(default_route_v6(v6), Some("eth0".into()));
    }

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
