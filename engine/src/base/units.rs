//! Parsing and printing of the quantities users type: sizes, rates and durations.
//!
//! Lengths are binary (`128K` = 131072 bytes), rates are decimal bits
//! (`25G` = 25 Gbit/s), durations accept `s`, `ms` and `m` (a bare number means seconds).

use super::error::{Error, Result};
use std::time::Duration;

fn split_suffix(text: &str) -> (&str, &str) {
    let at = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    (&text[..at], &text[at..])
}

fn parse_number(digits: &str, what: &str, original: &str) -> Result<f64> {
    let value: f64 = digits
        .parse()
        .map_err(|_| Error::usage(format!("invalid {what} '{original}': expected a number with an optional unit")))?;
    if !value.is_finite() || value < 0.0 {
        return Err(Error::usage(format!("invalid {what} '{original}': must be a non-negative number")));
    }
    Ok(value)
}

/// Parses a byte count with binary multipliers: `1470`, `64K`, `1.5M`, `1G` (also `KiB`, `k`).
pub fn parse_size(text: &str) -> Result<u64> {
    let trimmed = text.trim();
    let (digits, suffix) = split_suffix(trimmed);
    let value = parse_number(digits, "size", text)?;
    let multiplier: f64 = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(Error::usage(format!("invalid size '{text}': unit must be K, M or G"))),
    };
    let bytes = value * multiplier;
    if bytes.fract() != 0.0 || bytes > u64::MAX as f64 {
        return Err(Error::usage(format!("invalid size '{text}': not a whole number of bytes")));
    }
    Ok(bytes as u64)
}

/// Parses a rate in bits per second with decimal multipliers: `500M`, `25G`, `0` (unlimited).
pub fn parse_rate(text: &str) -> Result<u64> {
    let trimmed = text.trim();
    let (digits, suffix) = split_suffix(trimmed);
    let value = parse_number(digits, "rate", text)?;
    let lower = suffix.to_ascii_lowercase();
    let unit = lower.trim_end_matches("bps").trim_end_matches("bit/s").trim_end_matches("bit");
    let multiplier: f64 = match unit {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        "t" => 1e12,
        _ => return Err(Error::usage(format!("invalid rate '{text}': unit must be K, M, G or T (bits/s)"))),
    };
    Ok((value * multiplier).round() as u64)
}

/// Most sends one burst of `-b RATE/N` may have: iperf3's limit, which its server holds a
/// client's `burst` to.
pub const MAX_BURST: u32 = 1000;

/// Parses iperf3's rate with an optional burst: `100M` (no burst) or `100M/10` (10 sends back
/// to back, then a wait that holds the average at 100 Mbit/s).
pub fn parse_rate_burst(text: &str) -> Result<(u64, Option<u32>)> {
    let Some((rate, burst)) = text.split_once('/') else { return Ok((parse_rate(text)?, None)) };
    let n = burst.trim().parse::<u32>().ok().filter(|n| (1..=MAX_BURST).contains(n)).ok_or_else(|| {
        Error::usage(format!("invalid burst in '{text}': RATE/N sends N back to back, N from 1 to {MAX_BURST}"))
    })?;
    Ok((parse_rate(rate)?, Some(n)))
}

/// Parses a duration: `10` or `10s`, `250ms`, `2m`.
pub fn parse_duration(text: &str) -> Result<Duration> {
    let trimmed = text.trim();
    let (digits, suffix) = split_suffix(trimmed);
    let value = parse_number(digits, "duration", text)?;
    let seconds = match suffix.to_ascii_lowercase().as_str() {
        "" | "s" | "sec" => value,
        "ms" => value / 1e3,
        "us" => value / 1e6,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(Error::usage(format!("invalid duration '{text}': unit must be ms, s, m or h"))),
    };
    if seconds > 30.0 * 24.0 * 3600.0 {
        return Err(Error::usage(format!("invalid duration '{text}': longer than 30 days")));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Parses a CPU list as the kernel prints them: `0-3,8,10-11`.
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>> {
    let bad = || Error::usage(format!("invalid CPU list '{text}': expected e.g. 0-3,8"));
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => {
                (a.trim().parse::<usize>().map_err(|_| bad())?, b.trim().parse::<usize>().map_err(|_| bad())?)
            }
            None => {
                let cpu = part.trim().parse::<usize>().map_err(|_| bad())?;
                (cpu, cpu)
            }
        };
        if lo > hi || hi >= 4096 {
            return Err(bad());
        }
        for cpu in lo..=hi {
            if !cpus.contains(&cpu) {
                cpus.push(cpu);
            }
        }
    }
    if cpus.is_empty() {
        return Err(bad());
    }
    Ok(cpus)
}

/// A fixed unit for printed rates and byte counts, as iperf's `-f`: `k`, `m`, `g`, `t` print
/// rates in Kbits..Tbits/sec, `K`, `M`, `G`, `T` in KBytes..TBytes/sec; byte counts take the
/// same prefix. 0 (the default) chooses the unit by magnitude.
static FIXED_UNIT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Fixes the unit of every rate and byte count printed from now on (`-f`); `None` goes back
/// to choosing by magnitude. Refuses a letter other than k, m, g, t in either case.
pub fn set_fixed_unit(unit: Option<char>) -> Result<()> {
    let code = match unit {
        None => 0,
        Some(c @ ('k' | 'm' | 'g' | 't' | 'K' | 'M' | 'G' | 'T')) => c as u8,
        Some(c) => {
            return Err(Error::usage(format!("invalid unit '{c}': k, m, g, t (bits/s) or K, M, G, T (bytes/s)")))
        }
    };
    FIXED_UNIT.store(code, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

fn fixed_unit() -> Option<char> {
    match FIXED_UNIT.load(std::sync::atomic::Ordering::Relaxed) {
        0 => None,
        c => Some(c as char),
    }
}

/// The power of 1000 (bits) or 1024 (bytes) of a unit letter, and its prefix.
fn prefix_of(unit: char) -> (i32, &'static str) {
    match unit.to_ascii_lowercase() {
        'k' => (1, "K"),
        'm' => (2, "M"),
        'g' => (3, "G"),
        _ => (4, "T"),
    }
}

/// Formats bits per second the way iperf does: `21.4 Gbits/sec` (or in the `-f` unit).
pub fn format_bits_per_second(bps: f64) -> String {
    format_rate_in(bps, fixed_unit())
}

fn format_rate_in(bps: f64, fixed: Option<char>) -> String {
    if let Some(unit) = fixed {
        let (power, prefix) = prefix_of(unit);
        return if unit.is_ascii_uppercase() {
            format!("{:.2} {prefix}Bytes/sec", bps / 8.0 / 1024f64.powi(power))
        } else {
            format!("{:.2} {prefix}bits/sec", bps / 1000f64.powi(power))
        };
    }
    let (value, unit) = if bps >= 1e9 {
        (bps / 1e9, "Gbits/sec")
    } else if bps >= 1e6 {
        (bps / 1e6, "Mbits/sec")
    } else if bps >= 1e3 {
        (bps / 1e3, "Kbits/sec")
    } else {
        (bps, "bits/sec")
    };
    format!("{value:.2} {unit}")
}

/// A count with thousands separated by commas: 1234567 as "1,234,567".
pub fn group_thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Formats a byte count with binary units, as iperf's transfer column: `24.9 GBytes` (or with
/// the `-f` unit's prefix).
pub(crate) fn format_bytes(bytes: u64) -> String {
    format_bytes_in(bytes, fixed_unit())
}

fn format_bytes_in(bytes: u64, fixed: Option<char>) -> String {
    let b = bytes as f64;
    if let Some(unit) = fixed {
        let (power, prefix) = prefix_of(unit);
        return format!("{:.2} {prefix}Bytes", b / 1024f64.powi(power));
    }
    let (value, unit) = if b >= 1024.0 * 1024.0 * 1024.0 {
        (b / (1024.0 * 1024.0 * 1024.0), "GBytes")
    } else if b >= 1024.0 * 1024.0 {
        (b / (1024.0 * 1024.0), "MBytes")
    } else if b >= 1024.0 {
        (b / 1024.0, "KBytes")
    } else {
        (b, "Bytes")
    };
    format!("{value:.2} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixed_unit_prints_every_rate_in_it() {
        // The pure forms: setting the process-wide unit here would race other tests' output.
        assert_eq!(format_rate_in(2.5e9, Some('m')), "2500.00 Mbits/sec");
        assert_eq!(format_rate_in(8.0 * 2048.0, Some('K')), "2.00 KBytes/sec");
        assert_eq!(format_rate_in(2.5e9, None), "2.50 Gbits/sec");
        assert_eq!(format_bytes_in(3 << 30, Some('m')), "3072.00 MBytes");
        assert!(set_fixed_unit(Some('x')).is_err(), "only k, m, g, t in either case");
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,8").unwrap(), vec![0, 1, 2, 3, 8]);
        assert_eq!(parse_cpu_list("1").unwrap(), vec![1]);
        assert_eq!(parse_cpu_list("2,2,1").unwrap(), vec![2, 1], "duplicates dropped, order kept");
        for bad in ["", "a", "3-1", "1-", "99999"] {
            assert!(parse_cpu_list(bad).is_err(), "'{bad}' must be refused");
        }
    }

    #[test]
    fn sizes_are_binary() {
        assert_eq!(parse_size("128K").unwrap(), 131072, "K must mean 1024");
        assert_eq!(parse_size("1470").unwrap(), 1470);
        assert_eq!(parse_size("1.5M").unwrap(), 1572864);
        assert_eq!(parse_size("2g").unwrap(), 2 << 30);
        assert_eq!(parse_size("64KiB").unwrap(), 65536);
    }

    #[test]
    fn malformed_sizes_are_usage_errors() {
        for bad in ["", "K", "12Q", "-5", "1.3", "abc", "1e9"] {
            let err = parse_size(bad).expect_err(bad);
            assert_eq!(err.exit_code(), 2, "'{bad}' must be a usage error, got {err}");
        }
    }

    #[test]
    fn rates_are_decimal_bits() {
        assert_eq!(parse_rate("25G").unwrap(), 25_000_000_000);
        assert_eq!(parse_rate("500m").unwrap(), 500_000_000);
        assert_eq!(parse_rate("0").unwrap(), 0, "0 means unlimited");
        assert_eq!(parse_rate("10Gbps").unwrap(), 10_000_000_000);
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("10X").is_err());
        assert_eq!(parse_rate_burst("100M").unwrap(), (100_000_000, None));
        assert_eq!(parse_rate_burst("100M/10").unwrap(), (100_000_000, Some(10)));
        assert_eq!(parse_rate_burst("1G/1000").unwrap(), (1_000_000_000, Some(1000)));
        for bad in ["100M/0", "100M/1001", "100M/", "100M/x", "100M/-1", "/10", "x/10"] {
            assert!(parse_rate_burst(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("10 parsecs").is_err());
        assert!(parse_duration("99999h").is_err(), "absurd durations are refused");
    }

    #[test]
    fn formatting() {
        assert_eq!(format_bits_per_second(21.4e9), "21.40 Gbits/sec");
        assert_eq!(format_bits_per_second(940e6), "940.00 Mbits/sec");
        assert_eq!(format_bytes(3 << 30), "3.00 GBytes");
    }
}
