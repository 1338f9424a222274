//! Which network addresses a download may reach, and a resolver that hands reqwest only those.
//!
//! A URL a person passes (or a server redirects to) could name the host's own services, the
//! cloud metadata endpoint or the intranet, and the bytes would land in a reviewable stage:
//! server-side request forgery. So every hop's name is resolved here, every address is
//! checked, and the connection goes to an address that was checked (the resolver returns only
//! those; IP-literal hosts never reach a resolver, so [`check_url`] checks them directly).
//! `--allow-private-urls` is a person's explicit opt-in for their own intranet; even then
//! addresses nothing legitimate is served from (unspecified, multicast, broadcast, reserved)
//! stay refused.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Why an address is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The person's own machine or network (loopback, private, link-local, CGNAT, ULA):
    /// allowed only with `--allow-private-urls`.
    Private(&'static str),
    /// Never a server: unspecified, multicast, broadcast, documentation, reserved.
    Never(&'static str),
}

impl Refusal {
    /// The kind of address, in words.
    pub fn what(self) -> &'static str {
        match self {
            Refusal::Private(w) | Refusal::Never(w) => w,
        }
    }
}

/// Classifies an address; `None` means a public unicast address.
pub fn classify(ip: IpAddr) -> Option<Refusal> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], bits: u32) -> bool {
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

fn classify_v4(ip: Ipv4Addr) -> Option<Refusal> {
    use Refusal::{Never, Private};
    const TABLE: &[([u8; 4], u32, Refusal)] = &[
        ([0, 0, 0, 0], 8, Never("unspecified (\"this network\")")),
        ([127, 0, 0, 0], 8, Private("loopback")),
        ([10, 0, 0, 0], 8, Private("private (RFC 1918)")),
        ([172, 16, 0, 0], 12, Private("private (RFC 1918)")),
        ([192, 168, 0, 0], 16, Private("private (RFC 1918)")),
        ([169, 254, 0, 0], 16, Private("link-local")),
        ([100, 64, 0, 0], 10, Private("shared CGNAT (100.64.0.0/10)")),
        ([192, 0, 0, 0], 24, Never("IETF protocol assignment")),
        ([192, 0, 2, 0], 24, Never("documentation")),
        ([198, 51, 100, 0], 24, Never("documentation")),
        ([203, 0, 113, 0], 24, Never("documentation")),
        ([198, 18, 0, 0], 15, Private("benchmarking")),
        ([192, 88, 99, 0], 24, Never("deprecated 6to4 relay")),
        ([224, 0, 0, 0], 4, Never("multicast")),
        ([240, 0, 0, 0], 4, Never("reserved or broadcast")),
    ];
    TABLE
        .iter()
        .find(|(net, bits, _)| in_v4(ip, *net, *bits))
        .map(|(_, _, r)| *r)
}

fn in_v6(ip: Ipv6Addr, net: [u16; 8], bits: u32) -> bool {
    let mask = if bits == 0 {
        0
    } else {
        u128::MAX << (128 - bits)
    };
    (u128::from(ip) & mask) == (u128::from(Ipv6Addr::from(net)) & mask)
}

/// The IPv4 address in the low 32 bits.
fn low_v4(ip: Ipv6Addr) -> Ipv4Addr {
    Ipv4Addr::from((u128::from(ip) & 0xffff_ffff) as u32)
}

fn classify_v6(ip: Ipv6Addr) -> Option<Refusal> {
    use Refusal::{Never, Private};
    if ip.is_unspecified() {
        return Some(Never("unspecified"));
    }
    if ip.is_loopback() {
        return Some(Private("loopback"));
    }
    // Forms that carry an IPv4 address: judged by that address, so ::ffff:127.0.0.1 is loopback.
    let embeds_v4 = in_v6(ip, [0, 0, 0, 0, 0, 0xffff, 0, 0], 96) // v4-mapped
        || in_v6(ip, [0, 0, 0, 0, 0, 0, 0, 0], 96) // v4-compatible (deprecated)
        || in_v6(ip, [0, 0, 0, 0, 0xffff, 0, 0, 0], 96) // v4-translated
        || in_v6(ip, [0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96); // NAT64
    if embeds_v4 {
        return classify_v4(low_v4(ip));
    }
    if in_v6(ip, [0x2002, 0, 0, 0, 0, 0, 0, 0], 16) {
        // 6to4 carries the IPv4 address in bits 16..48.
        let v4 = Ipv4Addr::from(((u128::from(ip) >> 80) & 0xffff_ffff) as u32);
        return classify_v4(v4);
    }
    const TABLE: &[([u16; 8], u32, Refusal)] = &[
        (
            [0x64, 0xff9b, 1, 0, 0, 0, 0, 0],
            48,
            Private("local-use NAT64"),
        ),
        ([0x100, 0, 0, 0, 0, 0, 0, 0], 64, Never("discard-only")),
        (
            [0x2001, 0, 0, 0, 0, 0, 0, 0],
            32,
            Never("Teredo (hides an IPv4 address)"),
        ),
        ([0x2001, 0x2, 0, 0, 0, 0, 0, 0], 48, Private("benchmarking")),
        ([0x2001, 0x10, 0, 0, 0, 0, 0, 0], 28, Never("ORCHID")),
        ([0x2001, 0x20, 0, 0, 0, 0, 0, 0], 28, Never("ORCHIDv2")),
        (
            [0x2001, 0xdb8, 0, 0, 0, 0, 0, 0],
            32,
            Never("documentation"),
        ),
        ([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, Never("documentation")),
        ([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16, Never("segment routing")),
        (
            [0xfc00, 0, 0, 0, 0, 0, 0, 0],
            7,
            Private("unique local (fc00::/7)"),
        ),
        ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, Private("link-local")),
        ([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, Private("site-local")),
        ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, Never("multicast")),
    ];
    TABLE
        .iter()
        .find(|(net, bits, _)| in_v6(ip, *net, *bits))
        .map(|(_, _, r)| *r)
}

/// Whether `ip` may be reached, given the person's choice; the reason when it may not.
pub fn check(ip: IpAddr, allow_private: bool) -> Result<(), Refusal> {
    match classify(ip) {
        None => Ok(()),
        Some(Refusal::Private(_)) if allow_private => Ok(()),
        Some(r) => Err(r),
    }
}

/// The one line a person sees for a refused address.
pub fn refusal_message(host: &str, ip: IpAddr, r: Refusal) -> String {
    let shown = if host.trim_matches(['[', ']']) == ip.to_string() {
        ip.to_string()
    } else {
        format!("{host} resolves to {ip}, which")
    };
    match r {
        Refusal::Private(what) => format!(
            "{shown} is a {what} address; golem-orch refuses private addresses unless you pass --allow-private-urls"
        ),
        Refusal::Never(what) => format!(
            "{shown} is a {what} address, which golem-orch never fetches from (not even with --allow-private-urls)"
        ),
    }
}

/// Checks a URL whose host is an IP literal (those never reach a resolver); names pass here and
/// are checked by [`CheckedResolver`] when the connection is made.
pub fn check_url(url: &reqwest::Url, allow_private: bool) -> Result<(), String> {
    // The URL parser has already normalised numeric forms (`2130706433`, `0x7f.1`) to dotted quads.
    let Some(host) = url.host_str() else {
        return Err("the URL has no host".into());
    };
    let Ok(ip) = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    else {
        return Ok(());
    };
    check(ip, allow_private).map_err(|r| refusal_message(&ip.to_string(), ip, r))
}

/// A reqwest resolver that resolves with the system resolver and returns only checked
/// addresses: a name with any refused address is refused as a whole, so DNS that mixes a
/// public and a private answer cannot steer the connection.
#[derive(Debug, Clone)]
pub struct CheckedResolver {
    /// The person's `--allow-private-urls`.
    pub allow_private: bool,
}

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow_private = self.allow_private;
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if addrs.is_empty() {
                return Err(format!("{host} resolves to no address").into());
            }
            for a in &addrs {
                if let Err(r) = check(a.ip(), allow_private) {
                    return Err(refusal_message(&host, a.ip(), r).into());
                }
            }
            let addrs: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_special_addresses_are_refused_and_public_ones_pass() {
        let private = [
            "127.0.0.1",
            "127.255.255.254",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "::ffff:0:10.0.0.1",
            "64:ff9b::10.0.0.1",
            "64:ff9b:1::1",
            "2002:7f00:1::",
            "2002:c0a8:101::1",
            "fe80::1",
            "fd00::1",
            "fc00::1",
            "fec0::1",
        ];
        let never = [
            "0.0.0.0",
            "0.1.2.3",
            "::",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
            "240.0.0.1",
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.9",
            "ff02::1",
            "2001:db8::1",
            "2001::1",
            "::ffff:0.0.0.0",
            "::ffff:224.0.0.1",
        ];
        let public = [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::8.8.8.8",
            "2a00:1450::1",
        ];
        for a in private {
            let ip: IpAddr = a.parse().unwrap();
            assert!(matches!(classify(ip), Some(Refusal::Private(_))), "{a}");
            assert!(check(ip, false).is_err(), "{a}");
            assert!(check(ip, true).is_ok(), "{a}");
        }
        for a in never {
            let ip: IpAddr = a.parse().unwrap();
            assert!(matches!(classify(ip), Some(Refusal::Never(_))), "{a}");
            assert!(check(ip, true).is_err(), "{a}");
        }
        for a in public {
            let ip: IpAddr = a.parse().unwrap();
            assert_eq!(classify(ip), None, "{a}");
        }
    }

    #[test]
    fn ip_literal_urls_are_checked_before_any_connection() {
        let u = |s: &str| reqwest::Url::parse(s).unwrap();
        assert!(check_url(&u("http://127.0.0.1:8080/x"), false).is_err());
        assert!(check_url(&u("http://[::ffff:127.0.0.1]/x"), false).is_err());
        assert!(check_url(&u("http://[::]/x"), true).is_err());
        assert!(check_url(&u("http://0.0.0.0/x"), true).is_err());
        assert!(check_url(&u("http://2130706433/x"), false).is_err()); // 127.0.0.1 as a number
        assert!(check_url(&u("http://0x7f.1/x"), false).is_err());
        assert!(check_url(&u("http://127.0.0.1/x"), true).is_ok());
        assert!(check_url(&u("http://example.org/x"), false).is_ok());
        let msg = check_url(&u("http://169.254.169.254/latest"), false).unwrap_err();
        assert!(
            msg.contains("link-local") && msg.contains("--allow-private-urls"),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn the_resolver_refuses_names_that_resolve_to_loopback() {
        use reqwest::dns::Resolve;
        let r = CheckedResolver {
            allow_private: false,
        };
        let err = match r.resolve("localhost".parse().unwrap()).await {
            Err(e) => e.to_string(),
            Ok(_) => panic!("localhost resolved"),
        };
        assert!(err.contains("loopback"), "{err}");
        let allowed = CheckedResolver {
            allow_private: true,
        };
        let addrs: Vec<_> = match allowed.resolve("localhost".parse().unwrap()).await {
            Ok(a) => a.collect(),
            Err(e) => panic!("{e}"),
        };
        assert!(addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");
    }
}
