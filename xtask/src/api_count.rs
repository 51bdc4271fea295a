//! `cargo xtask api --count`: how many named items each published crate
//! shows its users, read from the `api/` listings: modules, types, uses,
//! constants, fields, variants, free functions and inherent methods. The
//! methods and associated types of trait impls (`Debug::fmt`, `From::from`,
//! `Algorithm::check` on each algorithm) are not counted: they come with the
//! impl, which the type's line already counts.

/// The named items of one listing.
pub fn named_items(listing: &str) -> usize {
    let lines: Vec<&str> = listing.lines().map(without_attributes).collect();
    let modules: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("pub mod "))
        .map(|m| m.split_whitespace().next().unwrap_or(m))
        .collect();
    let mut in_trait_impl = false;
    let mut count = 0;
    for line in lines {
        if line.starts_with("impl") {
            in_trait_impl = line.contains(" for ");
            continue;
        }
        let Some(item) = line.strip_prefix("pub ") else {
            continue;
        };
        const DECLARATIONS: [&str; 10] = [
            "struct ", "enum ", "trait ", "type ", "mod ", "const ", "static ", "use ", "union ",
            "macro ",
        ];
        if DECLARATIONS.iter().any(|d| item.starts_with(d)) {
            if item.starts_with("type ") && in_trait_impl && !in_module(&item[5..], &modules) {
                // An associated type of a trait impl (an alias's parent is
                // a module).
                continue;
            }
            // A new item: the fields and variants after it are its own.
            in_trait_impl = false;
            count += 1;
        } else if free_function(item, &modules) || !in_trait_impl {
            count += 1;
        }
    }
    count
}

/// Whether the item named at the start of `declared` (`k::m::Alias<T> = ..`)
/// is defined in a listed module.
fn in_module(declared: &str, modules: &[&str]) -> bool {
    // The path with each `<...>` left out: `k::B<L>::State` is `k::B::State`.
    let (mut name, mut depth) = (String::new(), 0);
    for c in declared.chars() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            ' ' if depth == 0 => break,
            _ if depth == 0 => name.push(c),
            _ => {}
        }
    }
    name.rsplit_once("::")
        .is_some_and(|(parent, _)| modules.contains(&parent))
}

/// A listing line with its leading `#[...]` attributes removed.
fn without_attributes(mut line: &str) -> &str {
    while let Some(rest) = line.strip_prefix("#[") {
        match rest.find("] ") {
            Some(end) => line = &rest[end + 2..],
            None => break,
        }
    }
    line
}

/// Whether `item` (after `pub `) is a function defined in a module, not a
/// method: its path before the name is a listed module.
fn free_function(item: &str, modules: &[&str]) -> bool {
    let mut rest = item;
    for qualifier in ["const ", "async ", "unsafe "] {
        rest = rest.strip_prefix(qualifier).unwrap_or(rest);
    }
    let Some(path) = rest.strip_prefix("fn ") else {
        return false;
    };
    let Some(end) = path.find(['<', '(']) else {
        return false;
    };
    // A method of a generic type has its type's parameters before its
    // name (`k::B<L>::check(`); a generic function's come just before `(`.
    if path[end..].starts_with('<') && !after_generics(&path[end..]).starts_with('(') {
        return false;
    }
    path[..end]
        .rsplit_once("::")
        .is_some_and(|(parent, _)| modules.contains(&parent))
}

/// What follows the balanced `<...>` that `text` starts with.
fn after_generics(text: &str) -> &str {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => {
                depth -= 1;
                if depth == 0 {
                    return &text[i + 1..];
                }
            }
            _ => {}
        }
    }
    ""
}

#[cfg(test)]
mod tests {
    use super::named_items;

    #[test]
    fn trait_impl_methods_are_not_counted_but_free_functions_are() {
        let listing = "\
pub mod k
pub mod k::m
pub struct k::A
impl k::A
pub fn k::A::new() -> Self
impl core::fmt::Debug for k::A
pub fn k::A::fmt(&self, &mut core::fmt::Formatter<'_>) -> core::fmt::Result
pub type k::A::Output = u8
pub fn k::m::run<C: k::Clock>(&k::A) -> u8
#[non_exhaustive] pub enum k::E
pub k::E::V
impl<L: k::L> k::L for k::B<L>
pub type k::B<L>::State = u8
pub fn k::B<L>::check(&self) -> bool
impl<L> k::B<L>
pub fn k::B<L>::new(L) -> Self
";
        // mods k, k::m; struct A; A::new; run; enum E; variant V; B::new.
        assert_eq!(named_items(listing), 8);
    }

    #[test]
    fn a_type_alias_after_a_trait_impl_is_counted() {
        let listing = "\
pub mod k
pub struct k::A
impl core::fmt::Debug for k::A
pub fn k::A::fmt(&self, &mut core::fmt::Formatter<'_>) -> core::fmt::Result
pub type k::A::Output = u8
pub type k::Alias<B> = k::A
";
        // mod k; struct A; the alias.
        assert_eq!(named_items(listing), 3);
    }
}
