//! Small pure time helpers: Kubernetes/Go timestamp and duration formats, and a `Clock` seam so
//! the sync logic can be tested with a manually advanced clock.
//!
//! Timestamps are formatted here (not with `humantime`) because Go's formats are needed exactly
//! and because the helpers must never panic, also for times before 1970 or after 9999.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Signed seconds since the Unix epoch plus a nanosecond part in `0..1e9`.
fn split_unix(t: SystemTime) -> (i64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (
            i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            d.subsec_nanos(),
        ),
        Err(e) => {
            // Before the epoch: floor to whole seconds, keep the nanos positive.
            let d = e.duration();
            let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            match d.subsec_nanos() {
                0 => (-secs, 0),
                n => (-secs - 1, 1_000_000_000 - n),
            }
        }
    }
}

/// Proleptic Gregorian (year, month 1-12, day 1-31) from days since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    // Shift the epoch to 0000-03-01 so leap days fall at the end of a 400-year era.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of era, 0..=146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // 0..=399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // 0..=365, March-based
    let mp = (5 * doy + 2) / 153; // 0..=11, March = 0
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn format_date_time(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, mo, d) = civil_from_days(days);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

/// RFC 3339 in UTC with whole seconds, as Kubernetes serializes `metav1.Time`:
/// `2026-11-22T18:46:47Z`. Sub-second parts are truncated.
pub fn rfc3339(t: SystemTime) -> String {
    let (secs, _) = split_unix(t);
    format!("{}Z", format_date_time(secs))
}

/// Go's `time.RFC3339Nano` in UTC: nanoseconds with trailing zeros trimmed, and no fraction at
/// all when it is zero (`2026-11-22T18:46:47.5Z`, `2026-11-22T18:46:47Z`).
pub fn rfc3339_nanos(t: SystemTime) -> String {
    let (secs, nanos) = split_unix(t);
    let mut s = format_date_time(secs);
    if nanos != 0 {
        let frac = format!("{nanos:09}");
        s.push('.');
        s.push_str(frac.trim_end_matches('0'));
    }
    s.push('Z');
    s
}

/// Days since 1970-01-01 from a proleptic Gregorian date (inverse of `civil_from_days`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The days of month `m` (1-12) of year `y` in the proleptic Gregorian calendar.
fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Parses RFC 3339 as Kubernetes and the CRI log format write it (`2026-11-22T18:46:47Z`,
/// `2026-11-22T18:46:47.123456789Z`, `2026-11-22T18:46:47.5+02:00`). `None` on anything else,
/// a day its month does not have included (Go's "day out of range").
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        if t.bytes().all(|c| c.is_ascii_digit()) {
            t.parse().ok()
        } else {
            None
        }
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || se > 60
    {
        return None;
    }
    let mut i = 19;
    let mut nanos: u32 = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let frac = &s[start..i];
        if frac.is_empty() || frac.len() > 9 {
            return None;
        }
        nanos = format!("{frac:0<9}").parse().ok()?;
    }
    let offset: i64 = match &s[i..] {
        "Z" | "z" => 0,
        tz if tz.len() == 6
            && matches!(tz.as_bytes()[0], b'+' | b'-')
            && tz.as_bytes()[3] == b':' =>
        {
            let oh = num(i + 1..i + 3)?;
            let om = num(i + 4..i + 6)?;
            let o = oh * 3600 + om * 60;
            if tz.starts_with('-') { -o } else { o }
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo as u32, d as u32) * 86_400 + h * 3600 + mi * 60 + se - offset;
    let n = i128::from(secs) * 1_000_000_000 + i128::from(nanos);
    let n = i64::try_from(n).ok()?;
    Some(from_unix_nanos(n))
}

/// Now, in nanoseconds since the Unix epoch (CRI timestamps); 0 before 1970 and i64::MAX after
/// 2262.
pub fn now_unix_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A point in time from nanoseconds since the Unix epoch (CRI timestamps); negative values are
/// before the epoch.
pub fn from_unix_nanos(n: i64) -> SystemTime {
    let d = Duration::from_nanos(n.unsigned_abs());
    if n >= 0 {
        UNIX_EPOCH.checked_add(d).unwrap_or(UNIX_EPOCH)
    } else {
        UNIX_EPOCH.checked_sub(d).unwrap_or(UNIX_EPOCH)
    }
}

/// Why a Go duration does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("negative duration {0:?} is not allowed")]
    Negative(String),
    #[error("invalid duration {0:?}")]
    Invalid(String),
    #[error("missing unit in duration {0:?}")]
    MissingUnit(String),
    #[error("unknown unit {unit:?} in duration {text:?}")]
    UnknownUnit { unit: String, text: String },
    #[error("duration {0:?} is too large")]
    TooLarge(String),
}

/// Parses a Go `time.ParseDuration` string as Kubernetes writes durations in configuration:
/// a sequence of decimal numbers, each with an optional fraction and a unit
/// (`ns`, `us`/`µs`/`μs`, `ms`, `s`, `m`, `h`), e.g. `20s`, `1m0s`, `1h2m3.5s`, `500ms`.
/// A bare `0` is accepted as in Go. Negative durations are rejected because nothing in nanolet's
/// configuration can use one.
pub fn parse_go_duration(s: &str) -> Result<Duration, DurationError> {
    let orig = s;
    let mut rest = s;
    if let Some(r) = rest.strip_prefix('+') {
        rest = r;
    } else if let Some(r) = rest.strip_prefix('-') {
        if r == "0" {
            return Ok(Duration::ZERO);
        }
        return Err(DurationError::Negative(orig.into()));
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(DurationError::Invalid(orig.into()));
    }
    let mut total: u128 = 0; // nanoseconds
    while !rest.is_empty() {
        // Integer part.
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, r) = rest.split_at(int_len);
        rest = r;
        // Fraction.
        let mut frac_part = "";
        if let Some(r) = rest.strip_prefix('.') {
            let frac_len = r.bytes().take_while(u8::is_ascii_digit).count();
            frac_part = &r[..frac_len];
            rest = &r[frac_len..];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(DurationError::Invalid(orig.into()));
        }
        // Unit: everything up to the next digit or '.'.
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(rest.len(), |(i, _)| i);
        let (unit, r) = rest.split_at(unit_len);
        rest = r;
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3600 * 1_000_000_000,
            "" => return Err(DurationError::MissingUnit(orig.into())),
            other => {
                return Err(DurationError::UnknownUnit {
                    unit: other.into(),
                    text: orig.into(),
                });
            }
        };
        let too_big = || DurationError::TooLarge(orig.into());
        let int_val: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse::<u128>().map_err(|_| too_big())?
        };
        let mut nanos = int_val.checked_mul(unit_nanos).ok_or_else(too_big)?;
        if !frac_part.is_empty() {
            // Only the first 30 fraction digits can matter for a nanosecond result.
            let digits = &frac_part[..frac_part.len().min(30)];
            let frac_val: u128 = digits.parse().map_err(|_| too_big())?;
            let scale = 10u128.pow(digits.len() as u32);
            nanos = nanos
                .checked_add(frac_val.checked_mul(unit_nanos).ok_or_else(too_big)? / scale)
                .ok_or_else(too_big)?;
        }
        total = total.checked_add(nanos).ok_or_else(too_big)?;
        // Go's durations are int64 nanoseconds.
        if total > i64::MAX as u128 {
            return Err(too_big());
        }
    }
    let secs = (total / 1_000_000_000) as u64;
    let nanos = (total % 1_000_000_000) as u32;
    Ok(Duration::new(secs, nanos))
}

/// Formats a duration as Go's `time.Duration.String()` does: `20s`, `1m0s`, `2h0m0s`, `500ms`,
/// `1.5s`, `0s`. Used when configuration is printed back in Kubernetes form.
pub fn format_go_duration(d: Duration) -> String {
    let total = d.as_nanos();
    if total == 0 {
        return "0s".into();
    }
    if total < 1_000_000_000 {
        // Below one second Go picks the largest unit that keeps an integer part.
        let (unit, div) = if total < 1_000 {
            ("ns", 1u128)
        } else if total < 1_000_000 {
            ("\u{b5}s", 1_000)
        } else {
            ("ms", 1_000_000)
        };
        return format!("{}{unit}", frac_string(total, div));
    }
    let secs_total = total / 1_000_000_000;
    let h = secs_total / 3600;
    let m = (secs_total / 60) % 60;
    let s_nanos = total % 60_000_000_000;
    let s = frac_string(s_nanos, 1_000_000_000);
    if h > 0 {
        format!("{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

/// `value / div` as a decimal with trailing zeros trimmed.
fn frac_string(value: u128, div: u128) -> String {
    let int = value / div;
    let rem = value % div;
    if rem == 0 {
        return int.to_string();
    }
    let width = div.ilog10() as usize;
    let frac = format!("{rem:0width$}");
    format!("{int}.{}", frac.trim_end_matches('0'))
}

/// The source of time for logic that must be testable: monotonic `now` for deadlines and
/// backoff, wall-clock `system_now` for timestamps written into statuses.
pub trait Clock: Send + Sync {
    fn now(&self) -> Instant;
    fn system_now(&self) -> SystemTime;
}

/// The real clocks.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealClock;

impl Clock for RealClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
    fn system_now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock that only moves when a test says so. Clones share the same time.
#[derive(Debug, Clone)]
pub struct FakeClock {
    inner: Arc<Mutex<(Instant, SystemTime)>>,
}

impl Default for FakeClock {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeClock {
    /// Starts at the real `Instant::now()` and a fixed, readable wall time
    /// (2026-01-01T00:00:00Z) so that formatted timestamps in tests are predictable.
    pub fn new() -> Self {
        Self::at(UNIX_EPOCH + Duration::from_secs(1_767_225_600))
    }

    /// Starts at the real `Instant::now()` and the given wall time.
    pub fn at(system: SystemTime) -> Self {
        FakeClock {
            inner: Arc::new(Mutex::new((Instant::now(), system))),
        }
    }

    fn lock(&self) -> MutexGuard<'_, (Instant, SystemTime)> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves both clocks forward by `d`.
    pub fn advance(&self, d: Duration) {
        let mut g = self.lock();
        g.0 += d;
        g.1 += d;
    }

    /// Sets the wall clock only (a clock step, e.g. NTP after boot); the monotonic clock is
    /// unaffected, as on a real machine.
    pub fn set_system_time(&self, t: SystemTime) {
        self.lock().1 = t;
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Instant {
        self.lock().0
    }
    fn system_now(&self) -> SystemTime {
        self.lock().1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64, nanos: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(secs, nanos)
    }

    #[test]
    fn rfc3339_seconds() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        // 2026-11-22T18:46:47Z
        assert_eq!(
            rfc3339(at(1_795_373_207, 999_999_999)),
            "2026-11-22T18:46:47Z"
        );
        // Leap day and end of a century-not-leap year.
        assert_eq!(rfc3339(at(951_782_400, 0)), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(at(4_107_542_399, 0)), "2100-02-28T23:59:59Z");
        assert_eq!(rfc3339(at(4_107_542_400, 0)), "2100-03-01T00:00:00Z");
        assert_eq!(rfc3339(at(1_704_067_199, 0)), "2023-12-31T23:59:59Z");
    }

    #[test]
    fn rfc3339_before_epoch_does_not_panic() {
        assert_eq!(
            rfc3339(UNIX_EPOCH - Duration::from_secs(1)),
            "1969-12-31T23:59:59Z"
        );
        assert_eq!(
            rfc3339_nanos(UNIX_EPOCH - Duration::from_millis(500)),
            "1969-12-31T23:59:59.5Z"
        );
    }

    #[test]
    fn rfc3339_nanos_trims_like_go() {
        assert_eq!(rfc3339_nanos(at(1_795_373_207, 0)), "2026-11-22T18:46:47Z");
        assert_eq!(
            rfc3339_nanos(at(1_795_373_207, 500_000_000)),
            "2026-11-22T18:46:47.5Z"
        );
        assert_eq!(
            rfc3339_nanos(at(1_795_373_207, 120_000)),
            "2026-11-22T18:46:47.00012Z"
        );
        assert_eq!(
            rfc3339_nanos(at(1_795_373_207, 1)),
            "2026-11-22T18:46:47.000000001Z"
        );
        assert_eq!(
            rfc3339_nanos(at(1_795_373_207, 123_456_789)),
            "2026-11-22T18:46:47.123456789Z"
        );
    }

    #[test]
    fn unix_nanos() {
        assert_eq!(from_unix_nanos(0), UNIX_EPOCH);
        assert_eq!(from_unix_nanos(1_500_000_001), at(1, 500_000_001));
        assert_eq!(
            from_unix_nanos(-1_000_000_000),
            UNIX_EPOCH - Duration::from_secs(1)
        );
        // Extremes do not panic.
        let _ = rfc3339_nanos(from_unix_nanos(i64::MAX));
        let _ = rfc3339_nanos(from_unix_nanos(i64::MIN));
    }

    #[test]
    fn parse_durations() {
        let ok = |s: &str| parse_go_duration(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(ok("20s"), Duration::from_secs(20));
        assert_eq!(ok("1m0s"), Duration::from_secs(60));
        assert_eq!(ok("1h2m3.5s"), Duration::from_millis(3_723_500));
        assert_eq!(ok("500ms"), Duration::from_millis(500));
        assert_eq!(ok("0s"), Duration::ZERO);
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("10us"), Duration::from_micros(10));
        assert_eq!(ok("10µs"), Duration::from_micros(10));
        assert_eq!(ok("10μs"), Duration::from_micros(10));
        assert_eq!(ok("7ns"), Duration::from_nanos(7));
        assert_eq!(ok("1.5h"), Duration::from_secs(5400));
        assert_eq!(ok(".5s"), Duration::from_millis(500));
        assert_eq!(ok("1.s"), Duration::from_secs(1));
        assert_eq!(ok("+2m"), Duration::from_secs(120));
        assert_eq!(ok("2562047h"), Duration::from_secs(2_562_047 * 3600));
        assert_eq!(ok("0.000000000001s"), Duration::ZERO);
    }

    #[test]
    fn parse_duration_errors() {
        for bad in [
            "",
            "x",
            "20",
            "s",
            ".s",
            "1.2.3s",
            "20 s",
            "1d",
            "-5s",
            "1m-5s",
            "20S",
            "3000000h",
            "99999999999999999999999999999999999999999999h",
        ] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?} should fail");
        }
        let e = parse_go_duration("1d").unwrap_err();
        assert!(e.to_string().contains("unknown unit \"d\""), "{e}");
    }

    #[test]
    fn format_durations_like_go() {
        let f = format_go_duration;
        assert_eq!(f(Duration::ZERO), "0s");
        assert_eq!(f(Duration::from_secs(20)), "20s");
        assert_eq!(f(Duration::from_secs(60)), "1m0s");
        assert_eq!(f(Duration::from_secs(120)), "2m0s");
        assert_eq!(f(Duration::from_secs(3600)), "1h0m0s");
        assert_eq!(f(Duration::from_millis(3_723_500)), "1h2m3.5s");
        assert_eq!(f(Duration::from_millis(500)), "500ms");
        assert_eq!(f(Duration::from_micros(1500)), "1.5ms");
        assert_eq!(f(Duration::from_micros(10)), "10µs");
        assert_eq!(f(Duration::from_nanos(7)), "7ns");
        assert_eq!(f(Duration::from_millis(1500)), "1.5s");
        for s in ["20s", "1m0s", "1h2m3.5s", "500ms", "10µs", "7ns", "2m0s"] {
            assert_eq!(f(parse_go_duration(s).unwrap()), s);
        }
    }

    #[test]
    fn fake_clock_advances_and_is_shared() {
        let c = FakeClock::new();
        let c2 = c.clone();
        let (m0, s0) = (c.now(), c.system_now());
        assert_eq!(rfc3339(s0), "2026-01-01T00:00:00Z");
        c.advance(Duration::from_secs(90));
        assert_eq!(c2.now() - m0, Duration::from_secs(90));
        assert_eq!(c2.system_now(), s0 + Duration::from_secs(90));
        c.set_system_time(UNIX_EPOCH);
        assert_eq!(c2.system_now(), UNIX_EPOCH);
        assert_eq!(c2.now() - m0, Duration::from_secs(90));
        let dynclock: Arc<dyn Clock> = Arc::new(c2);
        assert_eq!(dynclock.system_now(), UNIX_EPOCH);
        let real = RealClock;
        assert!(real.system_now() > UNIX_EPOCH);
    }

    #[test]
    fn rfc3339_parsing_round_trips() {
        for s in [
            "2026-11-22T18:46:47Z",
            "2026-11-22T18:46:47.5Z",
            "2024-02-29T00:00:00.123456789Z",
            "1969-12-31T23:59:59Z",
        ] {
            let t = parse_rfc3339(s).unwrap_or_else(|| panic!("{s}"));
            assert_eq!(rfc3339_nanos(t), s);
        }
        assert_eq!(
            parse_rfc3339("2026-11-22T20:46:47+02:00"),
            parse_rfc3339("2026-11-22T18:46:47Z")
        );
        for bad in [
            "",
            "2026-11-22",
            "2026-13-01T00:00:00Z",
            "2026-11-22T18:46:47",
            "x026-11-22T18:46:47Z",
            "2026-11-22T18:46:47.Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    /// RFC 3339 5.7 ("date-mday 01-28, 01-29, 01-30, 01-31 based on month/year") and Go's
    /// time.Parse ("day out of range"): no 31st of February, 29th only in a leap year.
    #[test]
    fn rfc3339_day_must_exist_in_its_month() {
        for bad in [
            "2026-02-31T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "1900-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-01-32T00:00:00Z",
            "2026-01-00T00:00:00Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
        for good in [
            "2024-02-29T00:00:00Z",
            "2000-02-29T00:00:00Z",
            "2026-04-30T00:00:00Z",
            "2026-12-31T23:59:59Z",
        ] {
            assert!(parse_rfc3339(good).is_some(), "{good}");
        }
    }
}
