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
    // A column per ASCII byte, counted a run at a time between the others.
    let mut total = 0;
    let mut rest = s;
    loop {
        let ascii = rest
            .bytes()
            .position(|b| !b.is_ascii())
            .unwrap_or(rest.len());
        total += ascii;
        let mut chars = rest[ascii..].chars();
        match chars.next() {
            Some(c) => total += char_width(c),
            None => return total,
        }
        rest = chars.as_str();
    }
}

/// `s` cut to at most `max` columns, with `…` where it was cut.
pub fn fit(s: &str, max: usize) -> String {
    if width(s) <= max {
        return s.to_owned();
    }
    // The longest prefix that leaves a column for the ellipsis, copied whole.
    let mut used = 0;
    let cut = s
        .char_indices()
        .find(|&(_, c)| {
            used += char_width(c);
            used + 1 > max
        })
        .map_or(s.len(), |(at, _)| at);
    let mut out = s[..cut].to_owned();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn width_counts_a_column_an_ascii_byte_and_the_others_by_character() {
        for s in [
            "",
            "plain ascii",
            "…",
            "ends with…",
            "中文 and ascii 中",
            "🎉x🎉",
            "é\u{301} combining",
            "\u{7f}\u{80}\u{ff}",
        ] {
            assert_eq!(width(s), s.chars().map(char_width).sum::<usize>(), "{s:?}");
            for max in 0..=width(s) + 1 {
                let cut = fit(s, max);
                assert!(
                    width(&cut) <= max.max(1) || cut.is_empty(),
                    "{s:?} at {max}: {cut:?}"
                );
            }
        }
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(fit("abcdef", 1), "…");
        assert_eq!(fit("abcdef", 0), "");
        assert_eq!(fit("abc", 3), "abc");
        assert_eq!(fit("中文字", 5), "中文…");
    }
}
