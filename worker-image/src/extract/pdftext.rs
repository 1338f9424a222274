//! The text of one PDF page, read from its content stream, and the parts of
//! it a reader does not see.
//!
//! lopdf's own `extract_text` gives the text but not where or how it is
//! drawn, and it loses ligatures: a font whose `Differences` array names one
//! glyph lopdf does not know (or whose encoding dictionary has no `/Type`)
//! falls back to StandardEncoding as a whole, so the ligature codes TeX fonts
//! use (`/fi` at 12...) decode to nothing ("coecients"). Here fonts get a
//! sanitised encoding, ligature glyphs become their letters, and a small walk
//! over the operations tracks the graphics state (`q`/`Q`, `cm`, text
//! matrix, font size, rendering mode, fill colour) so that each shown string
//! is known to be invisible (mode 3), white, tiny or outside the page.
//!
//! The text is laid out as lopdf lays it out (a line break at `T*`, `'`,
//! `"` and `ET`, a space after a `TJ` array and at a kerning gap beyond
//! 100), so reports stay comparable. Unlike lopdf, the walk follows the form
//! XObjects a page draws (`Do`), so text hidden in a form is neither lost
//! nor unflagged.

use std::collections::{BTreeMap, HashMap};

use lopdf::content::{Content, Operation};
use lopdf::{Dictionary, Document, Encoding, Object, ObjectId};

/// Operations of one page that are interpreted; the rest are skipped.
pub const MAX_OPS: usize = 1_000_000;
/// Nested `q` levels tracked.
const MAX_DEPTH: usize = 256;
/// Effective font sizes (points) at or below this are "tiny".
pub const TINY_PT: f64 = 2.0;
/// Parent levels searched for inherited page boxes.
const MAX_PARENTS: usize = 32;

/// Why a reader does not see a piece of text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Hidden {
    /// Text rendering mode 3 or 7 (neither filled nor stroked).
    Invisible,
    /// Filled in white.
    White,
    /// Drawn at an effective size of [`TINY_PT`] or less.
    Tiny,
    /// Drawn outside the page's CropBox (else MediaBox).
    Outside,
}

impl Hidden {
    /// How the warning names the reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Hidden::Invisible => "rendering mode 3 (invisible)",
            Hidden::White => "white fill (invisible on a white page)",
            Hidden::Tiny => "tiny text (2 pt or less)",
            Hidden::Outside => "outside the page",
        }
    }
}

/// What a page's content stream shows.
#[derive(Debug, Default)]
pub struct PageText {
    /// All shown text, hidden parts included, laid out as lopdf does.
    pub text: String,
    /// Each shown string a reader does not see, with the reason.
    pub hidden: Vec<(Hidden, String)>,
    /// Whether the page had more than [`MAX_OPS`] operations.
    pub ops_cut: bool,
    /// Operations interpreted (forms included).
    pub ops: usize,
}

type Matrix = [f64; 6];
const IDENTITY: Matrix = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0];

/// `m` then `n` (PDF's row-vector convention: `p × m × n`).
fn mul(m: &Matrix, n: &Matrix) -> Matrix {
    [
        m[0] * n[0] + m[1] * n[2],
        m[0] * n[1] + m[1] * n[3],
        m[2] * n[0] + m[3] * n[2],
        m[2] * n[1] + m[3] * n[3],
        m[4] * n[0] + m[5] * n[2] + n[4],
        m[4] * n[1] + m[5] * n[3] + n[5],
    ]
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Space {
    Gray,
    Rgb,
    Cmyk,
    Other,
}

/// The graphics state the walk needs (text state included, as `q`/`Q`
/// save and restore it).
#[derive(Debug, Clone)]
struct State {
    ctm: Matrix,
    space: Space,
    white: bool,
    font: Vec<u8>,
    size: f64,
    mode: i64,
    leading: f64,
}

impl Default for State {
    fn default() -> Self {
        Self {
            ctm: IDENTITY,
            space: Space::Gray,
            white: false,
            font: Vec::new(),
            size: 0.0,
            mode: 0,
            leading: 0.0,
        }
    }
}

fn num(op: &Operation, i: usize) -> Option<f64> {
    op.operands
        .get(i)
        .and_then(|o| o.as_float().ok())
        .map(f64::from)
        .filter(|v| v.is_finite())
}

fn nums<const N: usize>(op: &Operation) -> Option<[f64; N]> {
    let mut out = [0.0; N];
    for (i, slot) in out.iter_mut().enumerate() {
        *slot = num(op, i)?;
    }
    Some(out)
}

/// Whether colour components in `space` are white.
fn is_white(space: Space, c: &[f64]) -> bool {
    match (space, c) {
        (Space::Gray, [g]) => *g >= 0.99,
        (Space::Rgb, [r, g, b]) => [r, g, b].iter().all(|v| **v >= 0.99),
        (Space::Cmyk, [c, m, y, k]) => [c, m, y, k].iter().all(|v| **v <= 0.01),
        _ => false,
    }
}

fn colour_operands(op: &Operation) -> Vec<f64> {
    op.operands
        .iter()
        .take(5)
        .map_while(|o| o.as_float().ok().map(f64::from))
        .collect()
}

/// The letters a ligature character stands for.
fn ligature(c: char) -> Option<&'static str> {
    Some(match c {
        '\u{FB00}' => "ff",
        '\u{FB01}' => "fi",
        '\u{FB02}' => "fl",
        '\u{FB03}' => "ffi",
        '\u{FB04}' => "ffl",
        '\u{FB05}' | '\u{FB06}' => "st",
        _ => return None,
    })
}

/// `s` with ligature characters (U+FB00..U+FB06) spelled out.
pub fn unligature(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match ligature(c) {
            Some(l) => out.push_str(l),
            None => out.push(c),
        }
    }
    out
}

/// The text a glyph name stands for when lopdf's glyph list may not know it:
/// ligature names (`fi`, `f_f_i`), `uniXXXX` and `uXXXX[XX]` names, with any
/// `.suffix` (`fi.alt`) dropped.
fn glyph_name_text(name: &[u8]) -> Option<String> {
    let name = std::str::from_utf8(name).ok()?;
    let base = name.split('.').next().unwrap_or(name);
    match base {
        "ff" | "fi" | "fl" | "ffi" | "ffl" => return Some(base.to_string()),
        _ => {}
    }
    if let Some(hex) = base.strip_prefix("uni") {
        if !hex.is_empty() && hex.len() % 4 == 0 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            let units: Vec<u16> = (0..hex.len() / 4)
                .filter_map(|i| u16::from_str_radix(&hex[i * 4..i * 4 + 4], 16).ok())
                .collect();
            return Some(unligature(&String::from_utf16_lossy(&units)));
        }
    }
    if let Some(hex) = base.strip_prefix('u') {
        if (4..=6).contains(&hex.len()) && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            let c = u32::from_str_radix(hex, 16).ok().and_then(char::from_u32)?;
            return Some(unligature(&c.to_string()));
        }
    }
    if base.contains('_') {
        let parts: Vec<&str> = base.split('_').collect();
        if parts
            .iter()
            .all(|p| p.len() == 1 && p.bytes().all(|b| b.is_ascii_alphabetic()))
        {
            return Some(parts.concat());
        }
    }
    None
}

/// Whether lopdf's glyph list knows `name` (a one-entry `Differences` array
/// that lopdf accepts).
fn lopdf_knows(doc: &Document, name: &[u8], cache: &mut HashMap<Vec<u8>, bool>) -> bool {
    if let Some(known) = cache.get(name) {
        return *known;
    }
    let mut enc = Dictionary::new();
    enc.set("Type", Object::Name(b"Encoding".to_vec()));
    enc.set(
        "Differences",
        Object::Array(vec![Object::Integer(0), Object::Name(name.to_vec())]),
    );
    let mut font = Dictionary::new();
    font.set("Type", Object::Name(b"Font".to_vec()));
    font.set("Encoding", Object::Dictionary(enc));
    let known = matches!(font.get_font_encoding(doc), Ok(Encoding::Differences(_)));
    if cache.len() < 10_000 {
        cache.insert(name.to_vec(), known);
    }
    known
}

/// A font dictionary lopdf can decode, the codes decoded here instead, and
/// for a simple font with a ToUnicode map, its encoding for the codes that
/// map leaves out.
struct FixedFont {
    /// The font with its encoding sanitised.
    dict: Dictionary,
    over: BTreeMap<u8, String>,
    /// The font without its encoding, so lopdf reads its ToUnicode map,
    /// when it has one; and whether it is a one-byte (simple) font.
    map: Option<(Dictionary, bool)>,
}

/// Rewrites a font so lopdf decodes what it can: a ToUnicode map wins (as
/// the PDF specification says), with the encoding behind it for the codes
/// it leaves out (one-byte simple fonts only); a `Differences` array keeps
/// only the names lopdf knows, and the names it does not know but that
/// spell letters (ligatures, `uniXXXX`) are decoded here.
fn fix_font(doc: &Document, font: &Dictionary, cache: &mut HashMap<Vec<u8>, bool>) -> FixedFont {
    let mut dict = font.clone();
    dict.set("Type", Object::Name(b"Font".to_vec()));
    let mut over = BTreeMap::new();
    if let Some(enc) = font
        .get_deref(b"Encoding", doc)
        .ok()
        .and_then(|e| e.as_dict().ok())
    {
        let diffs = enc
            .get_deref(b"Differences", doc)
            .and_then(Object::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let mut kept = Vec::new();
        let mut code: i64 = 0;
        for obj in diffs.iter().take(4096) {
            match obj {
                Object::Integer(c) => code = *c,
                Object::Name(name) if (0..=255).contains(&code) => {
                    if let Some(text) = glyph_name_text(name) {
                        over.insert(code as u8, text);
                    } else if lopdf_knows(doc, name, cache) {
                        kept.push(Object::Integer(code));
                        kept.push(Object::Name(name.clone()));
                    }
                    code += 1;
                }
                _ => code += 1,
            }
        }
        let mut fixed = Dictionary::new();
        fixed.set("Type", Object::Name(b"Encoding".to_vec()));
        if let Ok(base) = enc.get_deref(b"BaseEncoding", doc) {
            fixed.set("BaseEncoding", base.clone());
        }
        fixed.set("Differences", Object::Array(kept));
        dict.set("Encoding", Object::Dictionary(fixed));
    }
    let map = font
        .get_deref(b"ToUnicode", doc)
        .and_then(Object::as_stream)
        .is_ok()
        .then(|| {
            let mut only_map = dict.clone();
            only_map.remove(b"Encoding");
            let simple = !font
                .get_deref(b"Subtype", doc)
                .and_then(Object::as_name)
                .is_ok_and(|s| s == b"Type0");
            (only_map, simple)
        });
    FixedFont { dict, over, map }
}

impl FixedFont {
    /// The decoder: the ToUnicode map when lopdf can read it (with the
    /// encoding behind it for a simple font), else the encoding.
    fn decoder<'d>(&'d self, doc: &'d Document) -> Option<Decoder<'d>> {
        if let Some((only_map, simple)) = &self.map {
            if let Ok(enc @ Encoding::UnicodeMapEncoding(_)) = only_map.get_font_encoding(doc) {
                return Some(Decoder {
                    enc,
                    over: &self.over,
                    fallback: if *simple {
                        self.dict.get_font_encoding(doc).ok()
                    } else {
                        None
                    },
                });
            }
        }
        Some(Decoder {
            enc: self.dict.get_font_encoding(doc).ok()?,
            over: &self.over,
            fallback: None,
        })
    }
}

/// How one font's shown strings are decoded.
struct Decoder<'d> {
    enc: Encoding<'d>,
    over: &'d BTreeMap<u8, String>,
    fallback: Option<Encoding<'d>>,
}

impl Decoder<'_> {
    /// One code of a one-byte font, by its encoding and the codes
    /// [`fix_font`] took over.
    fn by_encoding(&self, enc: &Encoding<'_>, b: u8, out: &mut String) {
        match self.over.get(&b) {
            Some(t) => out.push_str(t),
            None => {
                let _ = enc.write_to_string(&[b], out);
            }
        }
    }

    /// Decodes a shown string, ligatures spelled out.
    fn decode(&self, bytes: &[u8], out: &mut String) {
        let mut raw = String::new();
        if let Some(fallback) = &self.fallback {
            let mut piece = String::new();
            for &b in bytes {
                piece.clear();
                let _ = self.enc.write_to_string(&[b], &mut piece);
                if piece.is_empty() || piece.contains('\u{FFFD}') {
                    piece.clear();
                    self.by_encoding(fallback, b, &mut piece);
                }
                raw.push_str(&piece);
            }
        } else if self.over.is_empty() {
            let _ = self.enc.write_to_string(bytes, &mut raw);
        } else {
            for &b in bytes {
                self.by_encoding(&self.enc, b, &mut raw);
            }
        }
        out.push_str(&unligature(&raw));
    }
}

/// The page's visible area: CropBox, else MediaBox (both inheritable), as
/// `[x0, y0, x1, y1]` with `x0 <= x1`, `y0 <= y1`.
fn page_box(doc: &Document, page_id: ObjectId) -> Option<[f64; 4]> {
    for key in [b"CropBox".as_slice(), b"MediaBox".as_slice()] {
        let mut node = doc.get_dictionary(page_id).ok();
        for _ in 0..MAX_PARENTS {
            let Some(dict) = node else { break };
            if let Ok(arr) = dict.get_deref(key, doc).and_then(Object::as_array) {
                let v: Vec<f64> = arr
                    .iter()
                    .filter_map(|o| doc.dereference(o).ok()?.1.as_float().ok())
                    .map(f64::from)
                    .collect();
                if let [a, b, c, d] = v[..] {
                    return Some([a.min(c), b.min(d), a.max(c), b.max(d)]);
                }
            }
            node = dict
                .get(b"Parent")
                .and_then(Object::as_reference)
                .and_then(|id| doc.get_dictionary(id))
                .ok();
        }
    }
    None
}

/// Glyph names lopdf knows or not, remembered over a document's pages.
#[derive(Debug, Default)]
pub struct GlyphCache(HashMap<Vec<u8>, bool>);

/// Reads a page's text, and the text of the form XObjects it draws (to
/// [`MAX_FORM_DEPTH`], within the page's [`MAX_OPS`]). Fails only when the
/// page's content or resources cannot be read at all.
pub fn page_text(
    doc: &Document,
    page_id: ObjectId,
    cache: &mut GlyphCache,
) -> lopdf::Result<PageText> {
    let fonts = doc.get_page_fonts(page_id)?;
    let content = Content::decode(&doc.get_page_content(page_id)?)?;
    let (inline, ids) = doc.get_page_resources(page_id)?;
    let xobjects = inline
        .into_iter()
        .chain(ids.iter().filter_map(|id| doc.get_dictionary(*id).ok()))
        .find_map(|r| r.get_deref(b"XObject", doc).and_then(Object::as_dict).ok());
    let mut sh = Shared {
        doc,
        page: page_box(doc, page_id),
        out: PageText::default(),
        ops: 0,
        glyphs: std::mem::take(cache),
    };
    walk_stream(
        &mut sh,
        Fonts::Own(fonts),
        xobjects,
        &content.operations,
        State::default(),
        0,
    );
    *cache = sh.glyphs;
    sh.out.ops = sh.ops;
    Ok(sh.out)
}

/// Nested form XObjects followed.
pub const MAX_FORM_DEPTH: usize = 8;

/// What the walks of a page and of its forms share.
struct Shared<'d> {
    doc: &'d Document,
    page: Option<[f64; 4]>,
    out: PageText,
    /// Operations interpreted so far on this page, forms included.
    ops: usize,
    glyphs: GlyphCache,
}

/// The fonts a content stream uses: its own resources', or (a form
/// without resources) those of the stream that draws it.
enum Fonts<'d, 'p> {
    Own(BTreeMap<Vec<u8>, &'d Dictionary>),
    Inherited(&'p Encodings<'p>),
}

/// Interprets one content stream (a page's or a form's).
fn walk_stream(
    sh: &mut Shared<'_>,
    fonts: Fonts<'_, '_>,
    xobjects: Option<&Dictionary>,
    ops: &[Operation],
    state: State,
    depth: usize,
) {
    let doc = sh.doc;
    let fixed: BTreeMap<Vec<u8>, FixedFont> = match &fonts {
        Fonts::Own(fonts) => fonts
            .iter()
            .map(|(name, font)| (name.clone(), fix_font(doc, font, &mut sh.glyphs.0)))
            .collect(),
        Fonts::Inherited(_) => BTreeMap::new(),
    };
    let own: Encodings<'_> = fixed
        .iter()
        .filter_map(|(name, f)| Some((name.as_slice(), f.decoder(doc)?)))
        .collect();
    let encodings = match fonts {
        Fonts::Own(_) => &own,
        Fonts::Inherited(parent) => parent,
    };
    let mut walk = Walk {
        sh,
        encodings,
        xobjects,
        depth,
        state,
        stack: Vec::new(),
        tm: IDENTITY,
        tlm: IDENTITY,
    };
    for op in ops {
        if walk.sh.ops >= MAX_OPS {
            walk.sh.out.ops_cut = true;
            break;
        }
        walk.sh.ops += 1;
        walk.op(op);
    }
}

type Encodings<'d> = BTreeMap<&'d [u8], Decoder<'d>>;

struct Walk<'w, 'd, 'e> {
    sh: &'w mut Shared<'d>,
    encodings: &'e Encodings<'e>,
    xobjects: Option<&'e Dictionary>,
    depth: usize,
    state: State,
    stack: Vec<State>,
    tm: Matrix,
    tlm: Matrix,
}

impl Walk<'_, '_, '_> {
    /// Draws a form XObject (`Do`): its content with its matrix, resources
    /// and a copy of the graphics state. Images and anything else are
    /// skipped.
    fn form(&mut self, name: &[u8]) {
        if self.depth >= MAX_FORM_DEPTH {
            return;
        }
        let doc = self.sh.doc;
        let Some(stream) = self
            .xobjects
            .and_then(|x| x.get_deref(name, doc).ok())
            .and_then(|o| o.as_stream().ok())
        else {
            return;
        };
        if !stream
            .dict
            .get(b"Subtype")
            .and_then(Object::as_name)
            .is_ok_and(|s| s == b"Form")
        {
            return;
        }
        let data = stream
            .decompressed_content()
            .unwrap_or_else(|_| stream.content.clone());
        let Ok(content) = Content::decode(&data) else {
            return;
        };
        let mut state = self.state.clone();
        if let Ok(m) = stream.dict.get(b"Matrix").and_then(Object::as_array) {
            let v: Vec<f64> = m
                .iter()
                .filter_map(|o| o.as_float().ok().map(f64::from))
                .filter(|v| v.is_finite())
                .collect();
            if let [a, b, c, d, e, f] = v[..] {
                state.ctm = mul(&[a, b, c, d, e, f], &state.ctm);
            }
        }
        let resources = stream
            .dict
            .get_deref(b"Resources", doc)
            .and_then(Object::as_dict)
            .ok();
        let fonts = match resources.and_then(|r| r.get_deref(b"Font", doc).ok()) {
            Some(Object::Dictionary(fonts)) => Fonts::Own(
                fonts
                    .iter()
                    .filter_map(|(k, v)| {
                        Some((k.clone(), doc.dereference(v).ok()?.1.as_dict().ok()?))
                    })
                    .collect(),
            ),
            _ => Fonts::Inherited(self.encodings),
        };
        let xobjects = resources
            .and_then(|r| r.get_deref(b"XObject", doc).and_then(Object::as_dict).ok())
            .or(self.xobjects);
        let before = self.sh.out.text.len();
        walk_stream(
            self.sh,
            fonts,
            xobjects,
            &content.operations,
            state,
            self.depth + 1,
        );
        // A form is drawn apart: the text after it goes on a new line.
        if self.sh.out.text.len() > before {
            self.newline();
        }
    }

    fn newline(&mut self) {
        if !self.sh.out.text.ends_with('\n') {
            self.sh.out.text.push('\n');
        }
    }

    fn move_line(&mut self, tx: f64, ty: f64) {
        self.tlm = mul(&[1.0, 0.0, 0.0, 1.0, tx, ty], &self.tlm);
        self.tm = self.tlm;
    }

    fn set_fill(&mut self, space: Space, op: &Operation) {
        self.state.space = space;
        self.state.white = is_white(space, &colour_operands(op));
    }

    /// Interprets one operation: graphics state, text state and position,
    /// shown text, forms; the rest in [`Walk::fill_op`].
    fn op(&mut self, op: &Operation) {
        let st = &mut self.state;
        match op.operator.as_str() {
            "q" if self.stack.len() < MAX_DEPTH => self.stack.push(st.clone()),
            "Q" => {
                if let Some(saved) = self.stack.pop() {
                    self.state = saved;
                }
            }
            "cm" => {
                if let Some(m) = nums::<6>(op) {
                    st.ctm = mul(&m, &st.ctm);
                }
            }
            "BT" => {
                self.tm = IDENTITY;
                self.tlm = IDENTITY;
            }
            "ET" => self.newline(),
            "Tf" => {
                if let Some(Ok(name)) = op.operands.first().map(Object::as_name) {
                    st.font = name.to_vec();
                }
                st.size = num(op, 1).unwrap_or(st.size);
            }
            "Tr" => {
                st.mode = op
                    .operands
                    .first()
                    .and_then(|o| o.as_i64().ok())
                    .unwrap_or(0)
            }
            "TL" => st.leading = num(op, 0).unwrap_or(st.leading),
            "Td" => {
                if let Some([x, y]) = nums::<2>(op) {
                    self.move_line(x, y);
                }
            }
            "TD" => {
                if let Some([x, y]) = nums::<2>(op) {
                    st.leading = -y;
                    self.move_line(x, y);
                }
            }
            "Tm" => {
                if let Some(m) = nums::<6>(op) {
                    self.tm = m;
                    self.tlm = m;
                }
            }
            "T*" => {
                let l = st.leading;
                self.move_line(0.0, -l);
                self.newline();
            }
            "Tj" | "TJ" => self.show(&op.operands),
            "Do" => {
                if let Some(Ok(name)) = op.operands.first().map(Object::as_name) {
                    self.form(name);
                }
            }
            "'" | "\"" => {
                let l = st.leading;
                self.move_line(0.0, -l);
                self.newline();
                let at = if op.operator == "'" { 0 } else { 2 };
                if let Some(s) = op.operands.get(at) {
                    self.show(std::slice::from_ref(s));
                }
            }
            _ => self.fill_op(op),
        }
    }

    /// The fill colour operators (stroke colours do not hide filled text).
    fn fill_op(&mut self, op: &Operation) {
        match op.operator.as_str() {
            "g" => self.set_fill(Space::Gray, op),
            "rg" => self.set_fill(Space::Rgb, op),
            "k" => self.set_fill(Space::Cmyk, op),
            "cs" => {
                self.state.space = match op.operands.first().map(Object::as_name) {
                    Some(Ok(b"DeviceGray")) => Space::Gray,
                    Some(Ok(b"DeviceRGB")) => Space::Rgb,
                    Some(Ok(b"DeviceCMYK")) => Space::Cmyk,
                    _ => Space::Other,
                };
                self.state.white = false;
            }
            "sc" | "scn" => self.set_fill(self.state.space, op),
            _ => {}
        }
    }

    /// Why the text about to be shown is not seen, if it is not.
    fn hidden(&self, chars: usize) -> Option<Hidden> {
        let st = &self.state;
        if st.mode == 3 || st.mode == 7 {
            return Some(Hidden::Invisible);
        }
        if st.white && (st.mode == 0 || st.mode == 4) {
            return Some(Hidden::White);
        }
        let m = mul(&self.tm, &st.ctm);
        let size = st.size.abs() * m[2].hypot(m[3]);
        if size <= TINY_PT {
            return Some(Hidden::Tiny);
        }
        if let Some([x0, y0, x1, y1]) = self.sh.page {
            // Where the text starts, and a rough width (half an em per
            // character) so a line starting left of the page but running
            // onto it is not called outside.
            let (x, y) = (m[4], m[5]);
            let width = size * 0.5 * chars as f64;
            if x >= x1 || y >= y1 || y + size <= y0 || x + width <= x0 {
                return Some(Hidden::Outside);
            }
        }
        None
    }

    fn show(&mut self, operands: &[Object]) {
        let Some(decoder) = self.encodings.get(self.state.font.as_slice()) else {
            return;
        };
        let mut shown = String::new();
        collect(decoder, operands, &mut shown);
        let visible_chars = shown.chars().filter(|c| !c.is_whitespace()).count();
        if visible_chars > 0 {
            if let Some(reason) = self.hidden(visible_chars) {
                self.sh.out.hidden.push((reason, shown.clone()));
            }
        }
        self.sh.out.text.push_str(&shown);
    }
}

/// Shown strings as lopdf's `extract_text` joins them: a space after a `TJ`
/// array and at a kerning gap wider than 100 thousandths of an em.
fn collect(decoder: &Decoder<'_>, operands: &[Object], out: &mut String) {
    for operand in operands {
        match operand {
            Object::String(bytes, _) => decoder.decode(bytes, out),
            Object::Array(arr) => {
                for item in arr {
                    match item {
                        Object::String(bytes, _) => decoder.decode(bytes, out),
                        Object::Integer(i) if *i < -100 => out.push(' '),
                        _ => {}
                    }
                }
                out.push(' ');
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glyph_names_spell_their_letters() {
        assert_eq!(glyph_name_text(b"ffi").as_deref(), Some("ffi"));
        assert_eq!(glyph_name_text(b"f_f_l").as_deref(), Some("ffl"));
        assert_eq!(glyph_name_text(b"fi.alt").as_deref(), Some("fi"));
        assert_eq!(glyph_name_text(b"uniFB01").as_deref(), Some("fi"));
        assert_eq!(glyph_name_text(b"uni00410042").as_deref(), Some("AB"));
        assert_eq!(glyph_name_text(b"u1F600").as_deref(), Some("😀"));
        assert_eq!(glyph_name_text(b"a"), None);
        assert_eq!(glyph_name_text(b"g123"), None);
        assert_eq!(unligature("coe\u{FB03}cients \u{FB00}"), "coefficients ff");
    }

    #[test]
    fn matrices_compose_in_pdf_order() {
        let scale = [2.0, 0.0, 0.0, 2.0, 0.0, 0.0];
        let shift = [1.0, 0.0, 0.0, 1.0, 10.0, 20.0];
        // Shift in text space, then scale: the shift is scaled too.
        assert_eq!(mul(&shift, &scale), [2.0, 0.0, 0.0, 2.0, 20.0, 40.0]);
        assert!(is_white(Space::Cmyk, &[0.0, 0.0, 0.0, 0.0]));
        assert!(!is_white(Space::Cmyk, &[0.0, 0.0, 0.0, 1.0]));
        assert!(is_white(Space::Rgb, &[1.0, 1.0, 1.0]));
        assert!(!is_white(Space::Other, &[1.0]));
    }
}
