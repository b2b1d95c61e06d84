//! JavaScript dates: timestamps as `toISOString` writes them and as
//! `new Date(s).getTime()` reads them.

/// The current time as JavaScript's `toISOString` writes it.
pub fn now_timestamp() -> String {
    iso_timestamp(chrono::Utc::now().timestamp_millis())
}

/// Unix milliseconds as JavaScript's `toISOString` writes them (years 0 to
/// 9999; a time outside chrono's range is written as the epoch).
pub fn iso_timestamp(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

/// `new Date(s).getTime()` for ECMAScript's date-time string format
/// (`YYYY`, `YYYY-MM`, `YYYY-MM-DD`, each optionally with `THH:mm`, `:ss`,
/// `.fraction` and `Z` or an offset; `24:00` is the next midnight; days up to
/// 31 roll over into the next month as V8 does). `None` where JavaScript gives
/// `NaN`. Forms without an offset are read as UTC (JavaScript would use the
/// local time zone for date-times), and V8's legacy formats (`Mar 1 2023`)
/// are not recognised.
pub fn timestamp_millis(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let mut pos = 0;
    let num = |pos: &mut usize, digits: usize| -> Option<i64> {
        let part = s.get(*pos..*pos + digits)?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        *pos += digits;
        part.parse().ok()
    };
    let year = match b.first()? {
        b'+' | b'-' => {
            pos = 1;
            let y = num(&mut pos, 6)?;
            if b[0] == b'-' {
                if y == 0 {
                    return None;
                }
                -y
            } else {
                y
            }
        }
        _ => num(&mut pos, 4)?,
    };
    let (mut month, mut day) = (1, 1);
    if b.get(pos) == Some(&b'-') {
        pos += 1;
        month = num(&mut pos, 2)?;
        if b.get(pos) == Some(&b'-') {
            pos += 1;
            day = num(&mut pos, 2)?;
        }
    }
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let (mut hour, mut minute, mut second, mut millis) = (0, 0, 0, 0);
    let mut offset_minutes = 0;
    if matches!(b.get(pos), Some(b'T' | b't' | b' ')) {
        pos += 1;
        hour = num(&mut pos, 2)?;
        if b.get(pos) != Some(&b':') {
            return None;
        }
        pos += 1;
        minute = num(&mut pos, 2)?;
        if b.get(pos) == Some(&b':') {
            pos += 1;
            second = num(&mut pos, 2)?;
            if b.get(pos) == Some(&b'.') {
                pos += 1;
                let start = pos;
                while b.get(pos).is_some_and(u8::is_ascii_digit) {
                    pos += 1;
                }
                if pos == start {
                    return None;
                }
                let frac = &s[start..pos.min(start + 3)];
                millis =
                    frac.parse::<i64>().ok()? * 10_i64.pow(3 - u32::try_from(frac.len()).ok()?);
            }
        }
        if minute > 59
            || second > 59
            || hour > 24
            || (hour == 24 && (minute, second, millis) != (0, 0, 0))
        {
            return None;
        }
        match b.get(pos) {
            Some(b'Z' | b'z') => pos += 1,
            Some(&sign @ (b'+' | b'-')) => {
                pos += 1;
                let oh = num(&mut pos, 2)?;
                if b.get(pos) == Some(&b':') {
                    pos += 1;
                }
                let om = num(&mut pos, 2)?;
                if oh > 23 || om > 59 {
                    return None;
                }
                offset_minutes = (oh * 60 + om) * if sign == b'+' { 1 } else { -1 };
            }
            _ => {}
        }
    }
    if pos != b.len() {
        return None;
    }
    let days = days_from_civil(year, month, 1) + day - 1;
    let ms = (((days * 24 + hour) * 60 + minute - offset_minutes) * 60 + second) * 1000 + millis;
    // JavaScript dates end at ±8.64e15 ms.
    (ms.abs() <= 8_640_000_000_000_000).then_some(ms)
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_parse_like_javascript_dates() {
        assert_eq!(timestamp_millis("1970-01-01T00:00:01.500Z"), Some(1500));
        assert_eq!(timestamp_millis("garbage"), None);
        // Cases pi 0.83.0 (V8) answers, from the differential harness.
        assert_eq!(timestamp_millis("2023"), Some(1_672_531_200_000));
        assert_eq!(timestamp_millis("2023-03"), Some(1_677_628_800_000));
        assert_eq!(
            timestamp_millis("2023-03-01T10:00+01:00"),
            Some(1_677_661_200_000)
        );
        assert_eq!(
            timestamp_millis("2023-03-01T24:00:00.000Z"),
            Some(1_677_715_200_000)
        );
        assert_eq!(
            timestamp_millis("2023-02-30T00:00:00.000Z"),
            Some(1_677_715_200_000)
        );
        assert_eq!(
            timestamp_millis("2023-03-01T10:00:00.000+0530"),
            Some(1_677_645_000_000)
        );
        assert_eq!(timestamp_millis("2023-03-01T23:59:60.000Z"), None);
        assert_eq!(timestamp_millis(" 2023-03-01T10:00:00.000Z"), None);
    }
}
