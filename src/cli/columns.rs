//! Text in terminal columns: how wide a string shows (East Asian wide
//! characters and emoji take two columns, combining marks none), cutting to
//! a width, and padding to one, so that `tree` and `ls` line up whatever the
//! names hold; and how wide the terminal is.

/// The terminal's width in columns when `stdout` is one, else `None`.
pub fn terminal_width() -> Option<usize> {
    terminal_size::terminal_size_of(std::io::stdout()).map(|(w, _)| usize::from(w.0))
}

/// Columns a character takes, by Unicode's East Asian Width (the
/// `unicode-width` crate): 2 for wide characters and emoji, 0 for combining
/// marks; a control character counts 1 (output escapes them first, so one
/// never reaches the terminal raw).
pub fn char_width(c: char) -> usize {
    unicode_width::UnicodeWidthChar::width(c).unwrap_or(1)
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
        // Unicode's widths, where the old table guessed: a combining accent
        // takes no column, CJK punctuation and newer emoji two.
        assert_eq!(width("e\u{301}"), 1);
        assert_eq!(width("。🫠"), 4);
        assert_eq!(width("ｱ"), 1, "half-width katakana");
    }
}
