//! Text that came from a remote peer, made safe to log: a peer must not be able to forge a log
//! line (a newline followed by something that looks like ours) or fill the log with one
//! message.

use std::fmt::Write as _;

/// How much of one peer-supplied string a log line shows.
pub(crate) const PEER_TEXT_MAX: usize = 200;

/// Control characters (newlines included) and Unicode bidirectional overrides escaped, so the
/// text stays on one line and reads as it is; then cut to [`PEER_TEXT_MAX`] bytes, with how
/// much was cut.
pub fn peer_text(text: &str) -> String {
    let escaped = escape_controls(text);
    if escaped.len() <= PEER_TEXT_MAX {
        return escaped;
    }
    let mut cut = PEER_TEXT_MAX;
    while !escaped.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}... ({} bytes more)", &escaped[..cut], escaped.len() - cut)
}

/// Every control character as `\n`, `\r`, `\t` or `\u{..}`; bidirectional overrides too (they
/// reorder what a terminal shows). Ordinary text, including other non-ASCII, is unchanged.
pub fn escape_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// `items` without repeats, each where it first appears (notes and path texts gathered from
/// several threads read in the threads' order).
pub(crate) fn first_seen(items: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_seen_keeps_the_first_of_each_in_order() {
        let got = first_seen(["b", "a", "b", "c", "a"].map(String::from));
        assert_eq!(got, ["b", "a", "c"]);
    }

    #[test]
    fn a_forged_line_stays_on_one_line() {
        let forged = "hello\n[99] done 6.6.6.6:1: received 1 bytes\r\x1b[2K\u{202e}";
        let safe = peer_text(forged);
        assert!(!safe.contains('\n') && !safe.contains('\r') && !safe.contains('\x1b'), "{safe}");
        assert_eq!(safe, "hello\\n[99] done 6.6.6.6:1: received 1 bytes\\r\\u{1b}[2K\\u{202e}");
    }

    #[test]
    fn long_text_is_cut_on_a_char_boundary_with_the_rest_counted() {
        let long = "é".repeat(1000); // 2000 bytes
        let safe = peer_text(&long);
        assert!(safe.starts_with(&"é".repeat(100)), "200 bytes = 100 two-byte characters");
        assert!(safe.ends_with("... (1800 bytes more)"), "{safe}");
        assert_eq!(peer_text("ordinary text: ünïcode ok"), "ordinary text: ünïcode ok");
    }
}
