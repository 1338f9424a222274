//! Markdown: rendered to HTML with pulldown-cmark (as a viewer would), then
//! analysed by the HTML extractor, so raw HTML inside Markdown (hidden spans,
//! scripts, iframes, remote images) is judged exactly as in an HTML file.

use pulldown_cmark::{html, Options, Parser};

use super::Extracted;

/// Extracts a Markdown document; the title is its first heading.
pub fn extract(markdown: &str) -> Extracted {
    let mut options = Options::empty();
    options.insert(Options::ENABLE_TABLES);
    options.insert(Options::ENABLE_STRIKETHROUGH);
    options.insert(Options::ENABLE_FOOTNOTES);
    options.insert(Options::ENABLE_TASKLISTS);
    let parser = Parser::new_ext(markdown, options);
    let mut rendered = String::with_capacity(markdown.len() + markdown.len() / 2);
    html::push_html(&mut rendered, parser);
    let mut ex = super::html::extract_with(&rendered, "markdown");
    // A Markdown document's title is its first heading, never a <title> tag
    // smuggled in as raw HTML.
    ex.title = ex.outline.first().map(|h| h.text.clone());
    ex.details.remove("elements");
    ex.details.remove("max_depth");
    for key in ["scripts", "comments"] {
        if ex.details.get(key).is_some_and(|v| v == 0) {
            ex.details.remove(key);
        }
    }
    ex
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::WarningKind;

    #[test]
    fn headings_links_and_text() {
        let ex = extract(
            "# Project *Plan*\n\nIntro with [docs](https://docs.test/a) and \
             ![img](https://img.test/i.png).\n\n## Steps\n\n- one\n- two\n\n\
             ```\ncode <b>kept</b>\n```\n\n<span style=\"display:none\">psst</span>\n",
        );
        assert_eq!(ex.title.as_deref(), Some("Project Plan"));
        let outline: Vec<(u8, &str)> = ex
            .outline
            .iter()
            .map(|h| (h.level, h.text.as_str()))
            .collect();
        assert_eq!(outline, [(1, "Project Plan"), (2, "Steps")]);
        assert_eq!(ex.links[0].url, "https://docs.test/a");
        assert_eq!(ex.links[0].source, "markdown");
        assert!(ex
            .warnings
            .iter()
            .any(|w| w.kind == WarningKind::ExternalResource));
        assert!(ex
            .warnings
            .iter()
            .any(|w| w.kind == WarningKind::HiddenText));
        let text = ex.text.into_string();
        assert!(
            text.contains("Intro with docs and .") || text.contains("Intro with docs and"),
            "{text}"
        );
        assert!(text.contains("code <b>kept</b>"), "{text}");
        assert!(!text.contains("psst"));
    }
}
