//! The one date format the history shows: "YYYY-MM-DD HH:MM" in UTC, for the app's list and the
//! `kostant history` commands alike.

/// Milliseconds since the Unix epoch as "YYYY-MM-DD HH:MM" UTC, by H. Hinnant's civil-from-days
/// algorithm (no time crate for one format).
pub fn format_utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}",
        rem / 3600,
        (rem % 3600) / 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_civil_dates() {
        assert_eq!(format_utc(0), "1970-01-01 00:00");
        // A leap day, and a time late in a day.
        assert_eq!(format_utc(951_782_400_000), "2000-02-29 00:00");
        assert_eq!(format_utc(1_795_968_300_000), "2026-11-29 16:05");
        assert_eq!(format_utc(1_798_500_000_000), "2026-12-28 23:20");
        // Before the epoch: the minute it falls in, not a negative time of day.
        assert_eq!(format_utc(-1), "1969-12-31 23:59");
    }
}
