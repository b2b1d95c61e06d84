//! Text in terminal columns: how wide a string shows (East Asian wide
//! characters and most emoji take two columns), cutting to a width, and
//! padding to one, so that `tree` and `ls` line up whatever the names hold.

/// Columns a character takes: 2 for East Asian wide and most emoji, else 1
/// (zero-width marks count 1, so a measured line is never too short).
pub fn char_width(c: char) -> usize {
    match c as u32 {
        0x1100..=0x115f
        | 0x2e80..=0x303e
        | 0x3041..=0x33ff
        | 0x3400..=0x4dbf
        | 0x4e00..=0x9fff
        | 0xa000..=0xa4cf
        | 0xac00..=0xd7a3
        | 0xf900..=0xfaff
        | 0xfe30..=0xfe4f
        | 0xff00..=0xff60
        | 0xffe0..=0xffe6
        | 0x1f300..=0x1f64f
        | 0x1f900..=0x1f9ff
        | 0x20000..=0x3fffd => 2,
        _ => 1,
    }
}

/// Columns `s` takes.
pub fn width(s: &str) -> usize {
    s.chars().map(char_width).sum()
}

/// `s` cut to at most `max` columns, with `…` where it was cut.
pub fn fit(s: &str, max: usize) -> String {
    if width(s) <= max {
        return s.to_owned();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        let w = char_width(c);
        if used + w + 1 > max {
            break;
        }
        out.push(c);
        used += w;
    }
    if max > 0 {
        out.push('…');
    }
    out
}

/// `s` cut to `columns` and padded with spaces to exactly that many.
pub fn pad(s: &str, columns: usize) -> String {
    let cut = fit(s, columns);
    let room = columns.saturating_sub(width(&cut));
    format!("{cut}{}", " ".repeat(room))
}
