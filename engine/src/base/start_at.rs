//! `send --start-at TIME`: the instant a test's data is to start, on the sender's wall clock
//! (CLOCK_REALTIME), as Unix nanoseconds. Written as RFC 3339 (`2026-12-05T10:00:00.250Z`,
//! `2026-12-05T11:00:00+01:00`) or Unix seconds with a fraction (`1796464800.25`, what
//! iperf2's `--txstart-time` takes).

use crate::base::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The furthest ahead a start may be: a plan is scheduled within a day, and a time further
/// out is a typo (a wrong year, milliseconds given as seconds).
pub const MAX_AHEAD: Duration = Duration::from_secs(24 * 3600);

/// An instant on the wall clock, in nanoseconds since the Unix epoch (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct StartAt(pub u64);

impl StartAt {
    /// Parses RFC 3339 (a date, `T` or a space, a time with optional fraction, and `Z` or an
    /// offset) or Unix seconds with an optional fraction.
    pub fn parse(text: &str) -> Result<Self> {
        let t = text.trim();
        let bad = || {
            Error::usage(format!(
                "--start-at '{text}': not a time (RFC 3339 such as 2026-12-05T10:00:00.250Z, or Unix seconds such as 1796464800.25)"
            ))
        };
        let ns = if t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            unix_seconds(t).ok_or_else(bad)?
        } else {
            rfc3339(t).ok_or_else(bad)?
        };
        Ok(Self(ns))
    }

    /// Now, on this host's wall clock.
    pub fn now() -> Self {
        Self(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos().min(u128::from(u64::MAX)) as u64))
    }

    /// Refuses a start in the past or more than [`MAX_AHEAD`] after `now`.
    pub fn check(self, now: Self) -> Result<()> {
        if self <= now {
            return Err(Error::usage(format!(
                "--start-at {self}: that is {:.3} s in the past (now {now} on this host's clock)",
                (now.0 - self.0) as f64 / 1e9
            )));
        }
        if Duration::from_nanos(self.0 - now.0) > MAX_AHEAD {
            return Err(Error::usage(format!(
                "--start-at {self}: that is {:.0} s ahead, more than a day (now {now} on this host's clock)",
                (self.0 - now.0) as f64 / 1e9
            )));
        }
        Ok(())
    }

    /// Nanoseconds from `earlier` to this instant (negative when it came first).
    pub fn since(self, earlier: Self) -> i64 {
        (i128::from(self.0) - i128::from(earlier.0)).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }
}

/// RFC 3339 in UTC with nanoseconds: `2026-12-05T10:00:00.250000000Z`.
impl std::fmt::Display for StartAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = self.0 / 1_000_000_000;
        let (days, rem) = (secs / 86_400, secs % 86_400);
        let (y, m, d) = civil_from_days(days as i64);
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:09}Z",
            rem / 3600,
            rem / 60 % 60,
            rem % 60,
            self.0 % 1_000_000_000
        )
    }
}

fn unix_seconds(t: &str) -> Option<u64> {
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    if int.is_empty() || int.len() > 11 || frac.contains('.') {
        return None;
    }
    let secs: u64 = int.parse().ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(fraction_ns(frac)?)
}

/// Up to nine digits of a second as nanoseconds (further digits are below the clock's grain).
fn fraction_ns(frac: &str) -> Option<u64> {
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits = &frac[..frac.len().min(9)];
    let value: u64 = if digits.is_empty() { 0 } else { digits.parse().ok()? };
    Some(value * 10u64.pow(9 - digits.len() as u32))
}

fn rfc3339(t: &str) -> Option<u64> {
    let b = t.as_bytes();
    let num = |s: &str| -> Option<i64> { s.bytes().all(|c| c.is_ascii_digit()).then(|| s.parse().ok())? };
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (year, month, day) = (num(&t[0..4])?, num(&t[5..7])?, num(&t[8..10])?);
    let (hour, minute, second) = (num(&t[11..13])?, num(&t[14..16])?, num(&t[17..19])?);
    let mut rest = &t[19..];
    let mut frac_ns = 0;
    if let Some(r) = rest.strip_prefix('.') {
        let end = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
        if end == 0 {
            return None;
        }
        frac_ns = fraction_ns(&r[..end])?;
        rest = &r[end..];
    }
    let offset_s = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && (rest.starts_with('+') || rest.starts_with('-')) && &rest[3..4] == ":" => {
            let (oh, om) = (num(&rest[1..3])?, num(&rest[4..6])?);
            if oh > 23 || om > 59 {
                return None;
            }
            let s = oh * 3600 + om * 60;
            if rest.starts_with('-') {
                -s
            } else {
                s
            }
        }
        _ => return None,
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if !(1970..=9999).contains(&year) || !(1..=12).contains(&month) || day < 1 || day > month_days[month as usize - 1] {
        return None;
    }
    // 60 is a leap second, read as the next second's start.
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let secs = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset_s;
    u64::try_from(secs).ok()?.checked_mul(1_000_000_000)?.checked_add(frac_ns)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A Unix time in whole seconds as RFC 1123 writes it in GMT (HTTP's date, and iperf3's
/// `start.timestamp.time`): `Sun, 06 Dec 2026 03:30:08 GMT`.
pub fn rfc1123(unix_s: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let (days, rem) = (unix_s / 86_400, unix_s % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{}, {d:02} {} {y} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        MONTHS[(m - 1) as usize],
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The date of a day count since 1970-01-01 (the inverse of [`days_from_civil`]).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1123_is_iperf3s_timestamp() {
        // Both as Debian's iperf3 3.12 and a 3.21 build printed them (start.timestamp).
        assert_eq!(rfc1123(1_796_527_808), "Sun, 06 Dec 2026 03:30:08 GMT");
        assert_eq!(rfc1123(1_796_515_001), "Sat, 05 Dec 2026 23:56:41 GMT");
        assert_eq!(rfc1123(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(rfc1123(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
    }

    #[test]
    fn both_forms_read_the_same_instant() {
        // 2026-12-05T10:00:00Z is 1796464800 (date -u -d @1796464800).
        let want = StartAt(1_796_464_800_250_000_000);
        assert_eq!(StartAt::parse("1796464800.25").unwrap(), want);
        assert_eq!(StartAt::parse("2026-12-05T10:00:00.25Z").unwrap(), want);
        assert_eq!(StartAt::parse("2026-12-05 11:30:00.250+01:30").unwrap(), want);
        assert_eq!(StartAt::parse("2026-12-05T08:00:00.250000000999-02:00").unwrap(), want, "digits past ns dropped");
        assert_eq!(StartAt::parse("1796464800").unwrap(), StartAt(1_796_464_800_000_000_000));
        assert_eq!(want.to_string(), "2026-12-05T10:00:00.250000000Z");
        assert_eq!(StartAt::parse(&want.to_string()).unwrap(), want, "what is printed reads back");
        assert_eq!(StartAt::parse("2024-02-29T00:00:00Z").unwrap().to_string(), "2024-02-29T00:00:00.000000000Z");
    }

    #[test]
    fn malformed_times_are_refused() {
        for bad in [
            "",
            "soon",
            "1796464800.2.5",
            ".5",
            "2026-12-05T10:00:00",
            "2026-12-05T10:00:00+0100",
            "2026-13-05T10:00:00Z",
            "2026-02-29T10:00:00Z",
            "2026-12-05T24:00:00Z",
            "2026-12-05T10:00:00.Z",
            "99999999999999999999",
            "-5",
            "2026-12-05T10:00:00+25:00",
            "1969-12-31T23:59:59Z",
        ] {
            let e = StartAt::parse(bad).unwrap_err();
            assert!(e.message.contains("not a time"), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn past_and_far_future_are_refused() {
        let now = StartAt(1_796_464_800_000_000_000);
        assert!(StartAt(now.0 + 2_000_000_000).check(now).is_ok());
        let past = StartAt(now.0 - 1_500_000_000).check(now).unwrap_err().message;
        assert!(past.contains("1.500 s in the past"), "{past}");
        assert!(now.check(now).is_err(), "now is already too late");
        let far = StartAt(now.0 + MAX_AHEAD.as_nanos() as u64 + 1_000_000_000).check(now).unwrap_err().message;
        assert!(far.contains("more than a day"), "{far}");
        assert_eq!(StartAt(5).since(StartAt(7)), -2);
    }
}
