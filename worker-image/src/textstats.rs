//! Format-independent analysis of extracted text: a capped text buffer,
//! counts, bare URLs and an extractive summary.

use std::collections::{HashMap, HashSet};

/// A string that stops growing at a byte cap, remembering that it did, so a
/// huge or hostile document cannot make extraction use unbounded memory.
#[derive(Debug, Default, Clone)]
pub struct TextBuf {
    text: String,
    cap: usize,
    /// Whether anything was dropped at the cap.
    pub truncated: bool,
}

impl TextBuf {
    /// An empty buffer holding at most `cap` bytes.
    pub fn with_cap(cap: usize) -> Self {
        Self {
            text: String::new(),
            cap,
            truncated: false,
        }
    }

    /// Appends as much of `s` as fits (cut on a character boundary).
    pub fn push_str(&mut self, s: &str) {
        let room = self.cap.saturating_sub(self.text.len());
        if s.len() <= room {
            self.text.push_str(s);
            return;
        }
        let mut end = room;
        while end > 0 && !s.is_char_boundary(end) {
            end -= 1;
        }
        self.text.push_str(&s[..end]);
        self.truncated = true;
    }

    /// Appends one character if it fits.
    pub fn push(&mut self, c: char) {
        if self.text.len() + c.len_utf8() <= self.cap {
            self.text.push(c);
        } else {
            self.truncated = true;
        }
    }

    /// Ends the current line unless the text is empty or already ends one.
    pub fn newline(&mut self) {
        if !self.text.is_empty() && !self.text.ends_with('\n') {
            self.push('\n');
        }
    }

    /// Appends `s` with whitespace runs collapsed to single spaces (HTML and
    /// XML text), never starting a line with a space.
    pub fn push_collapsed(&mut self, s: &str) {
        for c in s.chars() {
            if c.is_whitespace() {
                if !self.text.is_empty() && !self.text.ends_with([' ', '\n']) {
                    self.push(' ');
                }
            } else {
                self.push(c);
            }
        }
    }

    /// The text so far.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The bytes held.
    pub fn len(&self) -> usize {
        self.text.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// The text, with trailing spaces removed from every line.
    pub fn into_string(self) -> String {
        if self.text.contains(" \n") || self.text.ends_with(' ') {
            let mut out = String::with_capacity(self.text.len());
            for (i, line) in self.text.split('\n').enumerate() {
                if i > 0 {
                    out.push('\n');
                }
                out.push_str(line.trim_end_matches(' '));
            }
            out
        } else {
            self.text
        }
    }
}

/// Word, line and character counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Whitespace-separated words.
    pub words: u64,
    /// Lines (a last line without `\n` counts).
    pub lines: u64,
    /// Unicode scalar values.
    pub chars: u64,
}

/// Counts words, lines and characters of `text`.
pub fn counts(text: &str) -> Counts {
    let newlines = text.bytes().filter(|&b| b == b'\n').count() as u64;
    let unterminated = u64::from(!text.is_empty() && !text.ends_with('\n'));
    Counts {
        words: text.split_whitespace().count() as u64,
        lines: newlines + unterminated,
        chars: text.chars().count() as u64,
    }
}

/// The longest URL kept; longer ones are cut (they are hostile anyway).
pub const MAX_URL_CHARS: usize = 2048;

/// Bare `http://`, `https://` and `mailto:` URLs in running text, in order
/// (duplicates included; the caller deduplicates).
pub fn bare_urls(text: &str) -> Vec<String> {
    let lower = text.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &lower[i..];
        let scheme = ["https://", "http://", "mailto:"]
            .into_iter()
            .find(|s| rest.starts_with(s));
        let at_word_start = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
        match scheme {
            Some(s) if at_word_start => {
                let end = text[i..]
                    .find(|c: char| {
                        c.is_whitespace()
                            || c.is_control()
                            || matches!(c, '<' | '>' | '"' | '\'' | '`' | '{' | '}' | '|' | '\\')
                    })
                    .map_or(text.len(), |n| i + n);
                let mut url = &text[i..end];
                loop {
                    let trimmed = url.trim_end_matches(['.', ',', ';', ':', '!', '?', '*', '_']);
                    let unbalanced = (trimmed.ends_with(')') && !trimmed.contains('('))
                        || (trimmed.ends_with(']') && !trimmed.contains('['));
                    let trimmed = if unbalanced {
                        &trimmed[..trimmed.len() - 1]
                    } else {
                        trimmed
                    };
                    if trimmed.len() == url.len() {
                        break;
                    }
                    url = trimmed;
                }
                if url.len() > s.len() {
                    out.push(url.chars().take(MAX_URL_CHARS).collect());
                }
                i = end.max(i + 1);
            }
            _ => i += 1,
        }
        while i < bytes.len() && !lower.is_char_boundary(i) {
            i += 1;
        }
    }
    out
}

/// Whether a URL is one the report lists as a link.
pub fn is_link_url(url: &str) -> bool {
    let lower = url.trim_start().to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://") || lower.starts_with("mailto:")
}

/// Common English words that carry no topic; excluded from scoring.
const STOPWORDS: &[&str] = &[
    "a", "about", "above", "after", "again", "all", "also", "am", "an", "and", "any", "are", "as",
    "at", "be", "because", "been", "before", "being", "between", "both", "but", "by", "can",
    "could", "did", "do", "does", "doing", "down", "during", "each", "few", "for", "from",
    "further", "had", "has", "have", "having", "he", "her", "here", "hers", "him", "his", "how",
    "i", "if", "in", "into", "is", "it", "its", "itself", "just", "me", "more", "most", "my", "no",
    "nor", "not", "now", "of", "off", "on", "once", "only", "or", "other", "our", "ours", "out",
    "over", "own", "same", "she", "should", "so", "some", "such", "than", "that", "the", "their",
    "them", "then", "there", "these", "they", "this", "those", "through", "to", "too", "under",
    "until", "up", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who",
    "whom", "why", "will", "with", "would", "you", "your", "yours",
];

/// Sentences considered for the summary (bounds time on huge texts).
const MAX_SENTENCES: usize = 20_000;
/// The longest sentence shown in a summary, in characters.
const MAX_SUMMARY_SENTENCE_CHARS: usize = 400;

/// Splits text into sentences: at `.`, `!` or `?` followed by whitespace, and
/// at blank lines and line ends that close a heading-like short line.
fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for para in text.split("\n\n") {
        let mut start = 0;
        let mut chars = para.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            let boundary = match c {
                // A spaced dot leader (`. . . .`) is not a run of
                // sentence ends.
                '.' if para[i + 1..].trim_start_matches(' ').starts_with('.') => false,
                '.' | '!' | '?' => chars.peek().is_none_or(|&(_, n)| n.is_whitespace()),
                '\n' => {
                    // A line without final punctuation that is followed by a
                    // new line is a heading or list item: its own sentence.
                    let line = para[start..i].trim();
                    !line.is_empty() && !line.ends_with([',', ';', ':']) && line.len() < 80
                }
                _ => false,
            };
            if boundary {
                let end = i + c.len_utf8();
                let s = para[start..end].trim();
                if !s.is_empty() {
                    out.push(s);
                }
                start = end;
                if out.len() >= MAX_SENTENCES {
                    return out;
                }
            }
        }
        let s = para[start..].trim();
        if !s.is_empty() {
            out.push(s);
        }
        if out.len() >= MAX_SENTENCES {
            break;
        }
    }
    out
}

fn words_of(s: &str) -> impl Iterator<Item = String> + '_ {
    s.split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|w| w.chars().count() > 1)
        .map(str::to_lowercase)
}

/// Whether a sentence is a table-of-contents or index line rather than
/// prose: it has a dot leader (four or more dots, `…`, `·` or `:` in a row,
/// single spaces between them allowed), or at least two of every five of
/// its words (or all of them) are page numbers (digits or lower-case roman
/// numerals).
fn is_toc_like(s: &str) -> bool {
    let mut run = 0;
    let mut gap = false;
    for c in s.chars() {
        match c {
            '.' | '·' | ':' => run += 1,
            '…' => run += 3,
            ' ' if run > 0 && !gap => {
                gap = true;
                continue;
            }
            _ => run = 0,
        }
        gap = false;
        if run >= 4 {
            return true;
        }
    }
    let tokens: Vec<&str> = s
        .split_whitespace()
        .map(|t| t.trim_matches(|c: char| !c.is_alphanumeric()))
        .filter(|t| !t.is_empty())
        .collect();
    let numbers = tokens
        .iter()
        .filter(|t| {
            t.chars().all(|c| c.is_ascii_digit())
                || (t.len() <= 5 && t.chars().all(|c| "ivxlc".contains(c)))
        })
        .count();
    (numbers > 0 && numbers == tokens.len())
        || (tokens.len() >= 3 && numbers * 5 >= tokens.len() * 2)
}

/// Picks up to `max` sentences with the highest average frequency of their
/// content words (stopwords excluded), and returns them in original order.
/// Very short sentences (under four words) are skipped unless nothing else
/// is there.
pub fn summarize(text: &str, max: usize) -> Vec<String> {
    let sents = sentences(text);
    if sents.is_empty() {
        return Vec::new();
    }
    let stop: HashSet<&str> = STOPWORDS.iter().copied().collect();
    let mut freq: HashMap<String, u32> = HashMap::new();
    for s in &sents {
        for w in words_of(s) {
            if !stop.contains(w.as_str()) {
                *freq.entry(w).or_insert(0) += 1;
            }
        }
    }
    let mut scored: Vec<(usize, f64)> = Vec::new();
    let candidates: Vec<usize> = (0..sents.len())
        .filter(|&i| !is_toc_like(sents[i]))
        .collect();
    for &i in &candidates {
        let s = sents[i];
        let words: Vec<String> = words_of(s).collect();
        if words.len() < 4 {
            continue;
        }
        let content: Vec<&String> = words
            .iter()
            .filter(|w| !stop.contains(w.as_str()))
            .collect();
        let sum: u32 = content
            .iter()
            .map(|w| freq.get(w.as_str()).copied().unwrap_or(0))
            .sum();
        // Normalise by length, damped so longer sentences are not punished
        // too hard.
        let score = f64::from(sum) / (words.len() as f64).sqrt();
        scored.push((i, score));
    }
    if scored.is_empty() {
        scored = candidates.iter().take(max).map(|&i| (i, 0.0)).collect();
    }
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(max);
    scored.sort_by_key(|&(i, _)| i);
    scored
        .into_iter()
        .filter_map(|(i, _)| sents.get(i))
        .map(|s| {
            let one_line: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
            let mut chars = one_line.chars();
            let mut kept: String = chars.by_ref().take(MAX_SUMMARY_SENTENCE_CHARS).collect();
            if chars.next().is_some() {
                kept.push('…');
            }
            kept
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn textbuf_caps_on_char_boundary() {
        let mut b = TextBuf::with_cap(4);
        b.push_str("abé");
        assert_eq!(b.as_str(), "abé");
        b.push_str("x");
        assert!(b.truncated);
        let mut b = TextBuf::with_cap(3);
        b.push_str("abé");
        assert_eq!(b.as_str(), "ab");
    }

    #[test]
    fn collapsed_text() {
        let mut b = TextBuf::with_cap(100);
        b.push_collapsed("  a \n\t b ");
        b.newline();
        b.push_collapsed(" c");
        assert_eq!(b.into_string(), "a b\nc");
    }

    #[test]
    fn counting() {
        assert_eq!(
            counts("one two\nthree"),
            Counts {
                words: 3,
                lines: 2,
                chars: 13
            }
        );
        assert_eq!(counts("").lines, 0);
    }

    #[test]
    fn finds_bare_urls() {
        let t = "See https://example.org/a_(b), (http://x.test/y). Mail mailto:me@x.test! \
                 nothttp://no and https:// alone; HTTPS://Upper.Test/Path.";
        assert_eq!(
            bare_urls(t),
            [
                "https://example.org/a_(b)",
                "http://x.test/y",
                "mailto:me@x.test",
                "HTTPS://Upper.Test/Path"
            ]
        );
    }

    #[test]
    fn summary_never_picks_table_of_contents_lines() {
        let text = "Contents\n\nIntroduction to the budget ........ 3\n\
                    Budget roads and budget parks . . . . . . 7\n\
                    Budget details for roads … … 9\n\
                    1 Budget roads 3 2 Budget parks 5 3 Budget schools 8 4 Budget 9\n\n\
                    The budget for roads grew this year. Parks kept their budget. \
                    The schools budget is new in this year's budget plan.\n";
        let summary = summarize(text, 5);
        assert_eq!(
            summary,
            [
                "The budget for roads grew this year.",
                "Parks kept their budget.",
                "The schools budget is new in this year's budget plan."
            ]
        );
        assert!(!is_toc_like(
            "It costs 3 dollars... or so, said the 2 of them."
        ));
        assert!(!is_toc_like(
            "In 2020 the plan changed and in 2021 it grew."
        ));
        assert!(is_toc_like("Index of terms.....12"));
        assert!(is_toc_like("Preface ix Foreword xi"));
        assert!(is_toc_like(
            "Function Index asn1_create : : : : : : : 9 asn1_delete"
        ));
        assert!(!is_toc_like(
            "Use std::io::Read and a::b: here is the rest of it."
        ));
        // Only TOC lines: no summary rather than a TOC line.
        assert!(summarize("Introduction ........ 3\nUsage ........ 5\n", 5).is_empty());
    }

    #[test]
    fn summary_prefers_frequent_topics_in_order() {
        let text = "Rust is a language. The borrow checker keeps Rust memory safe without a \
                    garbage collector. Cats are nice animals that sleep a lot. Rust programs \
                    use the borrow checker to keep memory safe and fast. Weather was fine.";
        let s = summarize(text, 2);
        assert_eq!(s.len(), 2);
        assert!(s[0].starts_with("The borrow checker"), "{s:?}");
        assert!(s[1].starts_with("Rust programs"), "{s:?}");
    }
}
