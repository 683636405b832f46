//! Targets as users type them, for every command that takes `-c`: `HOST`, `HOST:PORT`,
//! `[V6]`, `[V6]:PORT` (and a bare IPv6 address), the way the tool prints its own.

use crate::args::{Cli, Command};
use uringbench::Error;

/// What was typed, split into the host and the port it names (if any).
pub fn split(typed: &str) -> Result<(String, Option<u16>), String> {
    let bad = |why: &str| format!("target '{typed}': {why}; expected HOST, HOST:PORT, [IPv6] or [IPv6]:PORT");
    let port = |p: &str| {
        p.parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| bad(&format!("port '{p}' is not a number from 1 to 65535")))
    };
    if let Some(rest) = typed.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(|| bad("no closing ']'"))?;
        let addr = host.split('%').next().unwrap_or_default();
        if addr.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(bad(&format!("'{host}' in brackets is not an IPv6 address")));
        }
        return match after {
            "" => Ok((host.to_string(), None)),
            _ => Ok((host.to_string(), Some(port(after.strip_prefix(':').ok_or_else(|| bad("text after ']'"))?)?))),
        };
    }
    // More than one colon: an IPv6 address without brackets, which carries no port.
    if typed.matches(':').count() > 1 {
        return Ok((typed.to_string(), None));
    }
    match typed.split_once(':') {
        Some(("", _)) => Err(bad("no host")),
        Some((host, p)) => Ok((host.to_string(), Some(port(p)?))),
        None if typed.is_empty() => Err(bad("empty")),
        None => Ok((typed.to_string(), None)),
    }
}

/// Splits `target` in place; a port in it becomes `port`, unless `-p` names another.
fn resolve(target: &mut String, port: &mut Option<u16>) -> Result<(), Error> {
    let (host, in_target) = split(target).map_err(Error::usage)?;
    match (in_target, *port) {
        (Some(a), Some(b)) if a != b => {
            return Err(Error::usage(format!("target '{target}' names port {a} and -p {b}: give one of them")))
        }
        (Some(a), _) => *port = Some(a),
        _ => {}
    }
    *target = host;
    Ok(())
}

/// Every command's `-c` target as its host, with the port it named moved to `-p`.
pub fn normalize(cli: &mut Cli) -> Result<(), Error> {
    match &mut cli.command {
        Command::Send(a) => resolve(&mut a.to.target, &mut a.to.port),
        Command::Rr(a) | Command::Crr(a) => resolve(&mut a.to.target, &mut a.to.port),
        Command::Sweep(a) => resolve(&mut a.to.target, &mut a.to.port),
        Command::Search(a) => resolve(&mut a.to.target, &mut a.to.port),
        Command::Doctor(a) => match a.target.as_mut() {
            Some(t) => resolve(t, &mut a.port),
            None => Ok(()),
        },
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn the_spellings_users_type() {
        let s = |t: &str| split(t).unwrap();
        assert_eq!(s("10.0.0.2"), ("10.0.0.2".into(), None));
        assert_eq!(s("10.0.0.2:5300"), ("10.0.0.2".into(), Some(5300)));
        assert_eq!(s("host.example:80"), ("host.example".into(), Some(80)));
        assert_eq!(s("[::1]"), ("::1".into(), None));
        assert_eq!(s("[::1]:5300"), ("::1".into(), Some(5300)));
        assert_eq!(s("fe80::1"), ("fe80::1".into(), None));
        assert_eq!(s("[fe80::1%eth0]:7"), ("fe80::1%eth0".into(), Some(7)));
        for bad in ["", ":5300", "10.0.0.2:0", "10.0.0.2:x", "[::1", "[10.0.0.2]", "[::1]5300", "h:70000"] {
            assert!(split(bad).is_err(), "{bad}");
        }
    }
}
