//! Hiding rules from a page's own `<style>` blocks.
//!
//! Text hidden by a class (`.x{display:none}` in a `<style>` block) reads
//! as visible unless the stylesheet is applied; a real cascade is far too
//! much attack surface for this worker, so only the simple selectors that
//! hiding tricks use are resolved: `.class`, `#id`, and either with a tag
//! name in front (`span.x`, `div#y`). Anything more complex (descendants,
//! attributes, pseudo-classes) is ignored, so an ordinary stylesheet hides
//! nothing by accident.

use std::collections::HashMap;

use super::cap_chars;
use crate::warnings::css_hides;

/// The most `<style>` text read from one page.
const MAX_STYLE: usize = 1024 * 1024;
/// The most hiding selectors kept from one page.
const MAX_RULES: usize = 4096;

/// What a simple selector names: a class or an id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Class(String),
    Id(String),
}

/// The hiding selectors of one page, by the class or id they name.
#[derive(Debug, Default)]
pub struct HidingRules {
    /// For each class or id: the tag it is limited to (empty for any tag),
    /// the selector as written, and why it hides.
    rules: HashMap<Key, Vec<(String, String, &'static str)>>,
    /// Selectors kept, at most [`MAX_RULES`].
    count: usize,
}

impl HidingRules {
    /// Reads every `<style>` block of `html` (before tokenizing, so a
    /// stylesheet at the end of a page still applies to elements before it).
    pub fn from_html(html: &str) -> Self {
        let mut rules = Self::default();
        let mut from = 0;
        let mut read = 0usize;
        while let Some(open) = find_ascii_ci(html, from, "<style") {
            let Some(gt) = html[open..].find('>') else {
                break;
            };
            let start = open + gt + 1;
            let end = find_ascii_ci(html, start, "</style").unwrap_or(html.len());
            read += end - start;
            if read > MAX_STYLE {
                break;
            }
            rules.add_stylesheet(&html[start..end]);
            from = end;
        }
        rules
    }

    /// Adds the hiding rules of one stylesheet.
    pub fn add_stylesheet(&mut self, css: &str) {
        let css = strip_comments(css);
        for block in css.split('}') {
            let Some((prelude, decls)) = block.rsplit_once('{') else {
                continue;
            };
            // Rules for print only do not hide anything on screen.
            if prelude.to_ascii_lowercase().contains("print") {
                continue;
            }
            let Some(reason) = css_hides(decls) else {
                continue;
            };
            let selectors = prelude.rsplit('{').next().unwrap_or(prelude);
            for selector in selectors.split(',') {
                if let Some((tag, key)) = simple_selector(selector.trim()) {
                    if self.count >= MAX_RULES {
                        return;
                    }
                    self.count += 1;
                    self.rules.entry(key).or_default().push((
                        tag,
                        selector.trim().to_string(),
                        reason,
                    ));
                }
            }
        }
    }

    /// Whether the page has no hiding selector (then no element needs its
    /// class or id looked up).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Why an element `tag` with these `class` and `id` attributes is hidden
    /// by the page's stylesheet, as "display:none (.x)".
    pub fn reason(&self, tag: &str, class: Option<&str>, id: Option<&str>) -> Option<String> {
        if self.rules.is_empty() {
            return None;
        }
        let classes = class
            .into_iter()
            .flat_map(str::split_whitespace)
            .map(|c| Key::Class(c.to_string()));
        let ids = id.map(|i| Key::Id(i.trim().to_string()));
        classes.chain(ids).find_map(|key| {
            self.rules.get(&key)?.iter().find_map(|(only, sel, why)| {
                (only.is_empty() || only.eq_ignore_ascii_case(tag))
                    .then(|| format!("{why} ({})", cap_chars(sel, 60)))
            })
        })
    }
}

/// The byte position of ASCII `needle` in `hay` at or after `from`,
/// ignoring ASCII case, without lower-casing a copy of a large page.
fn find_ascii_ci(hay: &str, from: usize, needle: &str) -> Option<usize> {
    let n = needle.len();
    hay.as_bytes()
        .get(from..)?
        .windows(n)
        .position(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
        .map(|p| from + p)
}

fn strip_comments(css: &str) -> String {
    // `<!--` and `-->` inside a stylesheet are ignored by browsers (a relic of old pages);
    // left in, they would make the first rule's selector unreadable and the rule invisible.
    let css = css.replace("<!--", " ").replace("-->", " ");
    let css = css.as_str();
    let mut out = String::with_capacity(css.len());
    let mut rest = css;
    while let Some(pos) = rest.find("/*") {
        out.push_str(&rest[..pos]);
        match rest[pos + 2..].find("*/") {
            Some(end) => rest = &rest[pos + 2 + end + 2..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
}

/// `.x`, `#y`, `tag.x` or `tag#y`: the tag (lower-cased, empty for any) and
/// the class or id. Anything else is not resolved.
fn simple_selector(selector: &str) -> Option<(String, Key)> {
    let at = selector.find(['.', '#'])?;
    let (tag, rest) = selector.split_at(at);
    if !tag.chars().all(|c| c.is_ascii_alphanumeric()) {
        return None;
    }
    let name = &rest[1..];
    let ok = |c: char| c.is_alphanumeric() || c == '-' || c == '_';
    if name.is_empty() || !name.chars().all(ok) {
        return None;
    }
    let key = if rest.starts_with('.') {
        Key::Class(name.to_string())
    } else {
        Key::Id(name.to_string())
    };
    Some((tag.to_ascii_lowercase(), key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_selectors_resolve() {
        let r = HidingRules::from_html(
            "<style>/* x */ .x{display:none} #y { visibility: hidden }\n\
             span.tiny{font-size:0} .off,.also{position:absolute;left:-9999px}\n\
             @media screen { .m{display:none} } @media print { .nav{display:none} }\n\
             div p{display:none} a:hover{display:none} .note{color:#333}</style>",
        );
        assert_eq!(
            r.reason("p", Some("a x"), None).as_deref(),
            Some("display:none (.x)")
        );
        assert_eq!(
            r.reason("div", None, Some("y")).as_deref(),
            Some("visibility:hidden (#y)")
        );
        assert!(r.reason("span", Some("tiny"), None).is_some());
        assert!(r.reason("div", Some("tiny"), None).is_none());
        assert!(r.reason("p", Some("also"), None).is_some());
        assert!(r.reason("p", Some("m"), None).is_some());
        assert!(r.reason("p", Some("nav"), None).is_none());
        assert!(r.reason("p", Some("note"), None).is_none());
        assert!(r.reason("p", None, None).is_none());
    }

    #[test]
    fn upper_case_tags_and_long_selectors() {
        let long = "a".repeat(500);
        let r = HidingRules::from_html(&format!(
            "<P>x</P><STYLE type=text/css>.{long}{{display:none}}</STYLE><style>#z{{opacity:0}}"
        ));
        let why = r.reason("p", Some(&long), None).unwrap_or_default();
        assert!(
            why.starts_with("display:none (.aaa") && why.len() < 100,
            "{why}"
        );
        assert!(r.reason("p", None, Some("z")).is_some());
    }

    #[test]
    fn html_comment_markers_around_a_stylesheet_do_not_hide_its_first_rule() {
        let r = HidingRules::from_html("<style><!-- .x{display:none} --></style>");
        assert_eq!(
            r.reason("p", Some("x"), None).as_deref(),
            Some("display:none (.x)")
        );
    }

    #[test]
    fn ordinary_stylesheet_hides_nothing() {
        let r = HidingRules::from_html(
            "<style>.note{color:#333} body{margin:0} #main{font-size:12px}</style>",
        );
        assert!(r.rules.is_empty());
    }
}
