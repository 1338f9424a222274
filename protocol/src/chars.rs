//! THE set of dangerous characters: the ones that can drive a terminal, reorder or hide text, or
//! make two different names look the same. The host refuses them in names that leave a container
//! and escapes them in everything it prints; keeping one set here means a character added for one
//! purpose is covered for all of them.
//!
//! The set is, by design, wider than "control characters":
//!
//! - **C0 controls** (U+0000–U+001F), **DEL** (U+007F) and **C1 controls** (U+0080–U+009F): ESC
//!   starts CSI/OSC sequences (`\e[8m` hides text, `\e]52;c;...\a` writes the clipboard), and C1
//!   has single-byte equivalents of them (U+009B is CSI, U+009D is OSC) on some terminals.
//!   `\n` and `\t` are in the set too; a caller that keeps them in multi-line text says so itself.
//! - **Format characters** (general category `Cf`), which include the bidi controls that reorder
//!   what is displayed (U+202E RIGHT-TO-LEFT OVERRIDE makes `txt.exe` show as `exe.txt`) and the
//!   zero-width ones that make `.g\u{200c}it` look like `.git`.
//! - **Default-ignorable code points** (the Unicode property `Default_Ignorable_Code_Point`):
//!   characters a renderer draws as nothing, such as variation selectors, Hangul fillers
//!   (U+3164 looks like a space but is a letter) and the tag characters U+E0000–U+E007F, which
//!   can carry a whole hidden ASCII message.
//! - **Line and paragraph separators** (U+2028, U+2029), which some renderers treat as newlines.
//! - **Noncharacters** (U+FDD0–U+FDEF and the last two code points of every plane), which have
//!   no business in text that was meant to be read.
//!
//! The ranges follow Unicode 15.1 (`DerivedCoreProperties.txt` and `DerivedGeneralCategory.txt`).
//! Unassigned code points inside the default-ignorable ranges are included on purpose: a later
//! Unicode version may give them a meaning, and a terminal may already implement it.

/// Is `c` dangerous to show to a person or to accept in a name? See the module documentation for
/// what the set holds and why. `\n` and `\t` are dangerous here: a one-line field must never hold
/// them. Multi-line text that keeps them uses [`is_dangerous_in_text`].
pub fn is_dangerous(c: char) -> bool {
    is_control(c) || is_invisible(c) || is_noncharacter(c)
}

/// Like [`is_dangerous`], but `\n` and `\t` are allowed: for multi-line text such as logs and
/// diff bodies, whose layout is kept. `\r` stays dangerous (it moves the cursor back over a line).
pub fn is_dangerous_in_text(c: char) -> bool {
    c != '\n' && c != '\t' && is_dangerous(c)
}

/// Is `c` refused in a name that leaves a container? Every dangerous character, and one more
/// rule on top of the set for names only: the backslash, which other systems (and git on them)
/// read as a path separator, so `a\..\b` could climb out of where it was put. It is harmless
/// as text and so stays out of [`is_dangerous`]. The worker makes names with this rule, the host
/// refuses them with it, so a name the worker made safe is never refused.
pub fn is_refused_in_name(c: char) -> bool {
    c == '\\' || is_dangerous(c)
}

/// C0 controls, DEL and C1 controls: what terminals interpret as commands.
pub fn is_control(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
}

/// Characters that change how other text is displayed, or are displayed as nothing: the format
/// characters (category `Cf`, bidi controls among them), the other default-ignorable code points
/// (variation selectors, fillers, tags) and the line and paragraph separators.
pub fn is_invisible(c: char) -> bool {
    matches!(
        c,
        // SOFT HYPHEN: shown only at a line break.
        '\u{00AD}'
            // COMBINING GRAPHEME JOINER.
            | '\u{034F}'
            // Arabic number signs and end of ayah (Cf): prepended to the following digits.
            | '\u{0600}'..='\u{0605}'
            // ARABIC LETTER MARK (bidi).
            | '\u{061C}'
            | '\u{06DD}'
            // SYRIAC ABBREVIATION MARK.
            | '\u{070F}'
            // Arabic pound and piastre marks above (Cf).
            | '\u{0890}'..='\u{0891}'
            | '\u{08E2}'
            // HANGUL CHOSEONG and JUNGSEONG FILLER: letters drawn as nothing.
            | '\u{115F}'..='\u{1160}'
            // KHMER VOWEL INHERENT AQ and AA.
            | '\u{17B4}'..='\u{17B5}'
            // MONGOLIAN FREE VARIATION SELECTORS and VOWEL SEPARATOR.
            | '\u{180B}'..='\u{180F}'
            // ZERO WIDTH SPACE, NON-JOINER, JOINER; LEFT-TO-RIGHT and RIGHT-TO-LEFT MARK.
            | '\u{200B}'..='\u{200F}'
            // LINE SEPARATOR, PARAGRAPH SEPARATOR; bidi embeddings and overrides (U+202A–U+202E).
            | '\u{2028}'..='\u{202E}'
            // WORD JOINER, invisible operators, bidi isolates (U+2066–U+2069), deprecated
            // format characters (U+206A–U+206F); U+2065 is unassigned but default-ignorable.
            | '\u{2060}'..='\u{206F}'
            // HANGUL FILLER: looks like a space, is a letter.
            | '\u{3164}'
            // VARIATION SELECTORS 1–16.
            | '\u{FE00}'..='\u{FE0F}'
            // ZERO WIDTH NO-BREAK SPACE (byte order mark).
            | '\u{FEFF}'
            // HALFWIDTH HANGUL FILLER.
            | '\u{FFA0}'
            // Unassigned default-ignorables, then the interlinear annotation characters.
            | '\u{FFF0}'..='\u{FFFB}'
            // KAITHI NUMBER SIGN and NUMBER SIGN ABOVE.
            | '\u{110BD}'
            | '\u{110CD}'
            // EGYPTIAN HIEROGLYPH format controls.
            | '\u{13430}'..='\u{1343F}'
            // SHORTHAND FORMAT controls.
            | '\u{1BCA0}'..='\u{1BCA3}'
            // MUSICAL SYMBOL BEGIN/END BEAM, TIE, SLUR, PHRASE (format).
            | '\u{1D173}'..='\u{1D17A}'
            // TAG characters (U+E0000–U+E007F), VARIATION SELECTORS 17–256 (U+E0100–U+E01EF)
            // and the rest of the default-ignorable plane-14 block.
            | '\u{E0000}'..='\u{E0FFF}'
    )
}

/// Noncharacters: U+FDD0–U+FDEF and U+xFFFE/U+xFFFF in every plane.
pub fn is_noncharacter(c: char) -> bool {
    let n = u32::from(c);
    (0xFDD0..=0xFDEF).contains(&n) || (n & 0xFFFE) == 0xFFFE
}

/// The first dangerous character of `text` (by [`is_dangerous`]), if any: for a check that
/// wants to name what it refused.
pub fn first_dangerous(text: &str) -> Option<char> {
    text.chars().find(|&c| is_dangerous(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_controls_are_dangerous() {
        for c in ['\0', '\x07', '\x08', '\t', '\n', '\r', '\x1b', '\x7f'] {
            assert!(is_dangerous(c), "{c:?}");
        }
        // C1, including the single-byte CSI and OSC.
        for n in 0x80..=0x9f_u32 {
            assert!(is_dangerous(char::from_u32(n).unwrap()), "{n:#x}");
        }
    }

    #[test]
    fn newline_and_tab_are_kept_only_in_text() {
        assert!(!is_dangerous_in_text('\n'));
        assert!(!is_dangerous_in_text('\t'));
        assert!(is_dangerous_in_text('\r'));
        assert!(is_dangerous_in_text('\x1b'));
        assert!(is_dangerous_in_text('\u{202e}'));
    }

    #[test]
    fn bidi_controls_are_dangerous() {
        let bidi = [
            0x061c, 0x200e, 0x200f, 0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2066, 0x2067, 0x2068,
            0x2069,
        ];
        for n in bidi {
            assert!(is_dangerous(char::from_u32(n).unwrap()), "{n:#x}");
        }
    }

    #[test]
    fn invisible_and_look_alike_characters_are_dangerous() {
        let invisible = [
            0x00ad, 0x034f, 0x115f, 0x1160, 0x17b4, 0x17b5, 0x180b, 0x180e, 0x180f, 0x200b, 0x200c,
            0x200d, 0x2028, 0x2029, 0x2060, 0x2064, 0x206a, 0x206f, 0x3164, 0xfe00, 0xfe0f, 0xfeff,
            0xffa0, 0xfff9, 0xfffb, 0x1bca0, 0x1bca3, 0x1d173, 0x1d17a, 0xe0100, 0xe01ef,
        ];
        for n in invisible {
            assert!(is_dangerous(char::from_u32(n).unwrap()), "{n:#x}");
        }
    }

    #[test]
    fn every_tag_character_is_dangerous() {
        for n in 0xe0000..=0xe007f_u32 {
            assert!(is_dangerous(char::from_u32(n).unwrap()), "{n:#x}");
        }
    }

    #[test]
    fn noncharacters_are_dangerous() {
        for n in [0xfdd0, 0xfdef, 0xfffe, 0xffff, 0x1fffe, 0x10ffff] {
            assert!(is_dangerous(char::from_u32(n).unwrap()), "{n:#x}");
        }
    }

    #[test]
    fn ordinary_text_of_many_scripts_is_not_dangerous() {
        let text = "report.pdf Ünïcödé Ελληνικά кириллица 日本語 한국어 עברית العربية हिन्दी \
                    emoji 🎉 math ∑ space\u{a0}nbsp ~!@#$%^&*()_+-=[]{}|;':\",./<>?\\`";
        assert_eq!(first_dangerous(text), None);
        // The neighbours of the ranges stay ordinary.
        for c in [
            '\u{a0}', '\u{ae}', '\u{2027}', '\u{2030}', '\u{3163}', '\u{3165}', '\u{fdcf}',
        ] {
            assert!(!is_dangerous(c), "{c:?}");
        }
    }

    #[test]
    fn names_refuse_the_backslash_on_top_of_the_set() {
        assert!(is_refused_in_name('\\'));
        assert!(!is_dangerous('\\'));
        for n in 0..=0x10ffff_u32 {
            if let Some(c) = char::from_u32(n) {
                assert_eq!(
                    is_refused_in_name(c),
                    c == '\\' || is_dangerous(c),
                    "{n:#x}"
                );
            }
        }
    }

    #[test]
    fn first_dangerous_names_the_character() {
        assert_eq!(first_dangerous("a\u{e0041}b"), Some('\u{e0041}'));
        assert_eq!(first_dangerous("plain"), None);
    }
}
