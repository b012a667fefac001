//! Which addresses a request may connect to: none that reaches the host's own
//! machine or network (loopback, private, link-local, multicast, unspecified,
//! carrier-grade NAT, the cloud metadata addresses), in IPv4 and IPv6 and their
//! mapped forms, unless an `--http-allow` rule names the address literally.
//! Names are resolved here and the connection goes to exactly the addresses
//! decided on (a second lookup is how DNS rebinding gets in).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use super::AllowList;

/// Why `ip` may not be reached unless a rule names it, or `None`.
pub fn refused(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => refused_v4(v4),
            None => refused_v6(v6),
        },
    }
}

fn refused_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_private() {
        Some("private")
    } else if ip == Ipv4Addr::new(169, 254, 169, 254) {
        Some("cloud metadata")
    } else if ip.is_link_local() {
        Some("link-local")
    } else if ip.is_multicast() || ip.is_broadcast() {
        Some("multicast or broadcast")
    } else if ip.is_unspecified() || a == 0 {
        Some("unspecified (this host)")
    } else if a == 100 && (64..128).contains(&b) {
        Some("carrier-grade NAT (shared)")
    } else if a >= 240 {
        Some("reserved")
    } else {
        None
    }
}

fn refused_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_unspecified() {
        Some("unspecified (this host)")
    } else if ip == Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x254) {
        Some("cloud metadata")
    } else if first & 0xfe00 == 0xfc00 {
        Some("private (unique local)")
    } else if first & 0xffc0 == 0xfe80 {
        Some("link-local")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if let Some(v4) = ip.to_ipv4() {
        // IPv4-compatible (::a.b.c.d) and NAT64 forms reach IPv4 too.
        refused_v4(v4)
    } else if ip.segments()[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let [.., c, d] = ip.segments();
        refused_v4(Ipv4Addr::from((u32::from(c) << 16) | u32::from(d)))
    } else {
        None
    }
}

/// Whether `ip` may be reached under `allow`, or why not.
pub fn check(ip: IpAddr, allow: &AllowList) -> Result<(), String> {
    match refused(ip) {
        Some(why) if !allow.names_literally(ip) => Err(format!(
            "{ip} is a {why} address: refused unless an --http-allow rule names it literally"
        )),
        _ => Ok(()),
    }
}

/// The addresses `host` resolves to that pass [`check`]; an error saying why
/// when none does (`Err(Ok(why))`: refused, final) or the lookup failed
/// (`Err(Err(why))`: may pass later).
pub async fn vetted(
    host: &str,
    allow: &AllowList,
) -> Result<Vec<SocketAddr>, Result<String, String>> {
    let found: Vec<SocketAddr> = tokio::net::lookup_host((host, 0))
        .await
        .map_err(|e| Err(format!("{host} could not be resolved: {e}")))?
        .collect();
    let (passed, refused): (Vec<SocketAddr>, Vec<SocketAddr>) = found
        .into_iter()
        .partition(|a| check(a.ip(), allow).is_ok());
    if passed.is_empty() {
        let why = match refused.first() {
            Some(a) => check(a.ip(), allow).err().unwrap_or_default(),
            None => "no address".to_string(),
        };
        return Err(Ok(format!(
            "{host} resolves to no address the host may reach: {why}"
        )));
    }
    Ok(passed)
}

/// The resolver the HTTP client connects through: it looks a name up once and
/// hands the client only the addresses that pass [`check`].
pub struct GuardedResolver {
    pub allow: Arc<AllowList>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow = self.allow.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let passed = vetted(&host, &allow)
                .await
                .map_err(|why| why.unwrap_or_else(|e| e))?;
            Ok(Box::new(passed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn addresses_of_this_machine_and_its_network_are_refused_in_every_spelling() {
        for addr in [
            "127.0.0.1",
            "127.9.9.9",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.1.1",
            "0.0.0.0",
            "100.64.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd00:ec2::254",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:10.0.0.1",
            "64:ff9b::7f00:1",
        ] {
            assert!(refused(ip(addr)).is_some(), "{addr}");
        }
        for addr in [
            "93.184.216.34",
            "8.8.8.8",
            "2606:2800:220:1::1",
            "::ffff:8.8.8.8",
        ] {
            assert_eq!(refused(ip(addr)), None, "{addr}");
        }
    }

    #[test]
    fn a_rule_that_names_an_address_literally_lets_it_through() {
        let allow = AllowList::parse(&["http://127.0.0.1:9000".to_string()]).expect("rules");
        assert_eq!(check(ip("127.0.0.1"), &allow), Ok(()));
        assert!(check(ip("127.0.0.2"), &allow).is_err());
        assert!(check(ip("::1"), &AllowList::default())
            .unwrap_err()
            .contains("loopback"));
    }
}
