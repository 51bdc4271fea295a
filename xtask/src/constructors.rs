//! The constructor rule of ARCHITECTURE.md, checked on every published
//! crate: `new` never fails, a constructor that can reject its input says
//! so in its name (`try_*`, or an I/O verb such as `load`), and no
//! constructor panics on its arguments. The `pingora` drop-in modules copy
//! pingora's signatures and are exempt.

use std::path::Path;

/// Names of fallible constructors that read the outside world rather than
/// validate arguments: failing is what their verb says they may do
/// (`from_str` and serde's `deserialize` are trait methods that parse).
const IO_VERBS: &[&str] = &[
    "load",
    "parse",
    "open",
    "bind",
    "connect",
    "from_str",
    "deserialize",
];

/// The lines of a public-API listing (one item per line, as `cargo xtask
/// api` renders it) that break the rule, each with the reason.
pub fn listing_violations(listing: &str) -> Vec<String> {
    listing
        .lines()
        .filter(|line| !line.contains("::pingora::"))
        .filter_map(|line| {
            let f = parse_fn(line)?;
            let fallible = f.returns.contains("Result<") || f.returns.contains("Option<");
            if f.name == "new" && fallible {
                return Some(format!("`new` must not fail: {line}"));
            }
            let constructs = !f.has_receiver && f.returns.contains("Result<Self");
            let named = f.name.starts_with("try_") || IO_VERBS.contains(&f.name.as_str());
            (constructs && !named)
                .then(|| format!("a fallible constructor must be named `try_*`: {line}"))
        })
        .collect()
}

/// Constructors in the crate sources at `src` whose docs announce a panic
/// (`# Panics`): a constructor returns a `Result` instead. Reports
/// `file:line: name`. A source tree that cannot be read, or holds no Rust
/// file, is an error: the check must not pass by reading nothing.
pub fn panicking_constructors(src: &Path) -> Result<Vec<String>, String> {
    let mut found = Vec::new();
    let mut files = Vec::new();
    collect_sources(src, &mut files)?;
    if files.is_empty() {
        return Err(format!("no Rust sources under {}", src.display()));
    }
    files.sort();
    for file in files {
        if file.components().any(|c| c.as_os_str() == "pingora") {
            continue;
        }
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("reading {}: {e}", file.display()))?;
        for (line, name) in panicking_in(&text) {
            found.push(format!("{}:{line}: {name}", file.display()));
        }
    }
    Ok(found)
}

/// `(line number, name)` of each receiver-less `pub fn` returning `Self`
/// whose doc comment has a `# Panics` section.
fn panicking_in(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut panics = false;
    for (i, raw) in lines.iter().enumerate() {
        let line = raw.trim_start();
        if line.starts_with("///") {
            panics |= line.trim_start_matches('/').trim() == "# Panics";
            continue;
        }
        if line.starts_with("#[") {
            continue;
        }
        let signature_start = ["pub fn ", "pub const fn "]
            .iter()
            .any(|prefix| line.starts_with(prefix));
        if panics && signature_start {
            // The signature may span lines; it ends where the body opens.
            let signature: String = lines[i..]
                .iter()
                .take_while(|l| !l.trim_end().ends_with('{'))
                .chain(lines[i..].iter().find(|l| l.trim_end().ends_with('{')))
                .map(|l| l.trim())
                .collect::<Vec<_>>()
                .join(" ");
            if let Some(f) = parse_fn(&signature.replace(" {", ""))
                && !f.has_receiver
                && f.returns == "Self"
            {
                found.push((i + 1, f.name));
            }
        }
        panics = false;
    }
    found
}

fn collect_sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry
            .map_err(|e| format!("reading {}: {e}", dir.display()))?
            .path();
        if path.is_dir() {
            collect_sources(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

struct FnSignature {
    name: String,
    has_receiver: bool,
    returns: String,
}

/// Name, receiver and return type of a `pub fn` line, from the listing or
/// from source; `None` for anything else.
fn parse_fn(line: &str) -> Option<FnSignature> {
    let rest = [
        "pub fn ",
        "pub const fn ",
        "pub unsafe fn ",
        "pub async fn ",
    ]
    .iter()
    .find_map(|prefix| line.strip_prefix(prefix))?;
    // The argument list opens at the first `(` outside angle brackets.
    let mut depth = 0i32;
    let open = rest.char_indices().find_map(|(i, c)| {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            '(' if depth == 0 => return Some(i),
            _ => {}
        }
        None
    })?;
    let path = strip_trailing_generics(&rest[..open]);
    let name = path.rsplit("::").next()?.trim().to_string();
    let mut parens = 0i32;
    let close = rest[open..].char_indices().find_map(|(i, c)| {
        match c {
            '(' => parens += 1,
            ')' => {
                parens -= 1;
                if parens == 0 {
                    return Some(open + i);
                }
            }
            _ => {}
        }
        None
    })?;
    let first_arg = rest[open + 1..close].split(',').next().unwrap_or("");
    let has_receiver = first_arg
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .any(|word| word == "self");
    let returns = rest[close + 1..]
        .trim()
        .strip_prefix("->")
        .map(|r| r.split(" where ").next().unwrap_or(r).trim().to_string())
        .unwrap_or_default();
    Some(FnSignature {
        name,
        has_receiver,
        returns,
    })
}

/// `a::B<T>::f<U: X<Y>>` → `a::B<T>::f`.
fn strip_trailing_generics(path: &str) -> &str {
    let path = path.trim_end();
    if !path.ends_with('>') {
        return path;
    }
    let mut depth = 0i32;
    for (i, c) in path.char_indices().rev() {
        match c {
            '>' => depth += 1,
            '<' => {
                depth -= 1;
                if depth == 0 {
                    return &path[..i];
                }
            }
            _ => {}
        }
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_new_and_an_unmarked_fallible_constructor_are_reported() {
        let listing = "\
pub fn a::Quota::new(u32, core::time::Duration) -> core::result::Result<Self, a::QuotaError>
pub fn a::Ewma<a::Clock>::with_clock(core::time::Duration, C) -> core::result::Result<Self, a::E>
pub fn a::Ewma<a::Clock>::try_with_clock(core::time::Duration, C) -> core::result::Result<Self, a::E>
pub fn a::K::load<C: a::Clock, R: a::R<X>>(a::B<C, R>) -> core::result::Result<Self, a::KernelError>
pub fn a::Builder::build(self) -> core::result::Result<a::Thing, a::E>
pub fn a::Thing::peek(&self, u32) -> core::result::Result<Self, a::E>
pub const fn a::Shape::rows<const H: usize, const S: usize>() -> Self
pub fn a::pingora::rate::Rate::new(core::time::Duration) -> core::result::Result<Self, a::E>
";
        let violations = listing_violations(listing);
        assert_eq!(violations.len(), 2, "{violations:#?}");
        assert!(violations[0].contains("`new` must not fail"));
        assert!(violations[1].contains("Ewma<a::Clock>::with_clock"));
    }

    #[test]
    fn constructors_documenting_a_panic_are_found_in_source() {
        let source = "
impl Thing {
    /// Makes one.
    ///
    /// # Panics
    ///
    /// If `n` is zero.
    #[must_use]
    pub fn new(n: usize) -> Self {
        Self(n)
    }

    /// # Panics
    ///
    /// If the prefix is over 128.
    pub fn prefix(mut self, prefix: u8) -> Self {
        self
    }

    /// Never panics.
    pub fn with(
        n: NonZeroUsize,
    ) -> Self {
        Self(n)
    }

    /// # Panics
    ///
    /// If `n` is zero.
    pub fn spread(
        n: usize,
    ) -> Self {
        Self(n)
    }
}
";
        assert_eq!(
            panicking_in(source),
            vec![(9, "new".to_string()), (30, "spread".to_string())]
        );
    }

    #[test]
    fn a_source_tree_that_cannot_be_read_or_is_empty_is_an_error() {
        let missing = std::env::temp_dir().join("weir-xtask-no-such-crate/src");
        assert!(panicking_constructors(&missing).is_err());
        let empty = std::env::temp_dir().join(format!("weir-xtask-empty-{}", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        let result = panicking_constructors(&empty);
        std::fs::remove_dir_all(&empty).unwrap();
        assert!(result.unwrap_err().contains("no Rust sources"));
    }
}
