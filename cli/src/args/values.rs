//! The value parsers of the command line (rates, sizes, durations, CPU lists, TOS and DSCP)
//! and the value types they make. Compiled with the rest of the definitions (see the parent
//! module's note).

use super::*;

/// Requests per second: a number with an optional k or M.
pub(crate) fn request_rate(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1e3),
        Some((i, 'm' | 'M')) => (&t[..i], 1e6),
        _ => (t, 1.0),
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v * mult),
        _ => Err(format!("invalid rate '{s}': expected requests per second, e.g. 5000 or 20k")),
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ProtoArg {
    Tcp,
    Udp,
}

/// A `--cpus` value; a newtype so clap takes it as one value, not a list of values.
#[derive(Clone)]
pub struct CpuList(pub Vec<usize>);

/// A TOS byte: decimal, 0x hex or 0 octal, 0 to 255.
pub(crate) fn tos(s: &str) -> Result<u8, String> {
    let t = s.trim();
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u32::from_str_radix(h, 16)
    } else if t.len() > 1 && t.starts_with('0') {
        u32::from_str_radix(&t[1..], 8)
    } else {
        t.parse::<u32>()
    };
    match v {
        Ok(v) if v <= 255 => Ok(v as u8),
        Ok(v) => Err(format!("TOS {v} out of range: 0 to 255 (0xff)")),
        Err(_) => Err(format!("invalid TOS '{s}': expected a number, e.g. 0x28 or 40")),
    }
}

/// A DSCP name or number, as the TOS byte it makes (DSCP << 2).
pub(crate) fn dscp(s: &str) -> Result<u8, String> {
    let t = s.trim().to_ascii_uppercase();
    let code = match t.as_str() {
        "EF" => Some(46),
        "VA" | "VOICE-ADMIT" => Some(44),
        "BE" | "DF" => Some(0),
        _ => {
            if let Some(cs) = t.strip_prefix("CS").and_then(|n| n.parse::<u8>().ok()).filter(|n| *n <= 7) {
                Some(cs * 8)
            } else if let Some(af) = t.strip_prefix("AF").filter(|n| n.len() == 2) {
                let (class, drop) = (af.as_bytes()[0].wrapping_sub(b'0'), af.as_bytes()[1].wrapping_sub(b'0'));
                ((1..=4).contains(&class) && (1..=3).contains(&drop)).then_some(class * 8 + drop * 2)
            } else {
                t.parse::<u8>().ok().filter(|n| *n <= 63)
            }
        }
    };
    code.map(|c| c << 2).ok_or_else(|| format!("invalid DSCP '{s}': EF, AF11..AF43, CS0..CS7, VA, or 0 to 63"))
}

pub(crate) fn cpu_list(s: &str) -> Result<CpuList, String> {
    units::parse_cpu_list(s).map(CpuList).map_err(|e| e.message)
}
pub(crate) fn duration(s: &str) -> Result<std::time::Duration, String> {
    units::parse_duration(s).map_err(|e| e.message)
}
pub(crate) fn size(s: &str) -> Result<u64, String> {
    units::parse_size(s).map_err(|e| e.message)
}
/// A count of at least one (queues): a negative or zero count says what is allowed.
pub(crate) fn at_least_one(s: &str) -> Result<u32, String> {
    match s.trim().parse::<i64>() {
        Ok(n) if (1..=i64::from(u32::MAX)).contains(&n) => Ok(n as u32),
        Ok(n) => Err(format!("{n} is out of range: a whole number from 1 to {}", u32::MAX)),
        Err(_) => Err(format!("'{s}' is not a whole number (1 to {})", u32::MAX)),
    }
}
pub(crate) fn rate(s: &str) -> Result<u64, String> {
    units::parse_rate(s).map_err(|e| e.message)
}
/// `-b`: a rate per flow, and the burst of iperf3's `RATE/N` form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OfferedRate {
    /// Bits per second; 0 unlimited.
    pub bps: u64,
    /// Sends back to back before the rate is checked (`/N`).
    pub burst: Option<u32>,
}

/// A rate where `max` (as iperf3 writes it) means unlimited, like 0, with iperf3's optional
/// burst (`100M/10`).
pub(crate) fn rate_or_max(s: &str) -> Result<OfferedRate, String> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(format!("'{s}' is negative: a rate per flow such as 500M or 10G, 0 or max for unlimited"));
    }
    let (head, burst) = t.split_once('/').map_or((t, None), |(h, n)| (h, Some(n)));
    let head = if head.trim().eq_ignore_ascii_case("max") { "0" } else { head };
    let text = burst.map_or_else(|| head.to_string(), |n| format!("{head}/{n}"));
    let (bps, burst) = units::parse_rate_burst(&text).map_err(|e| e.message)?;
    Ok(OfferedRate { bps, burst })
}
/// One of iperf's -f letters (`a`, adaptive, is the default and means none).
pub(crate) fn unit_letter(s: &str) -> Result<char, String> {
    let mut chars = s.trim().chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if "kmgtKMGT".contains(c) => Ok(c),
        _ => Err(format!("invalid unit '{s}': k, m, g, t (bits/s) or K, M, G, T (bytes/s)")),
    }
}
