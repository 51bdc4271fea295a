//! The report: Markdown written to a folder under `target/`, with every table
//! also printed to the terminal as it is produced.

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// How big a run is: `--quick` for a few minutes, full for the blog's scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// A short run (under three minutes for the whole report).
    Quick,
    /// The full run (the blog's 100 M events).
    Full,
}

impl Scale {
    /// Pick `quick` or `full` according to the scale.
    pub fn pick<T>(self, quick: T, full: T) -> T {
        match self {
            Scale::Quick => quick,
            Scale::Full => full,
        }
    }
}

/// A table of text cells with a header row.
#[derive(Debug, Clone, Default)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new<I, S>(headers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            headers: headers.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Append a row; it must have one cell per header.
    pub fn row<I, S>(&mut self, cells: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let row: Vec<String> = cells.into_iter().map(Into::into).collect();
        assert_eq!(
            row.len(),
            self.headers.len(),
            "row width must match headers"
        );
        self.rows.push(row);
    }

    /// The table as GitHub-flavoured Markdown.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        out.push_str(&line(&self.headers));
        let rule: Vec<String> = self.headers.iter().map(|_| "---".to_string()).collect();
        out.push_str(&line(&rule));
        for row in &self.rows {
            out.push_str(&line(row));
        }
        out
    }

    /// The table as aligned plain text for the terminal.
    pub fn plain(&self) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let mut line = |cells: &[String]| {
            for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
                let sep = if i == 0 { "" } else { "  " };
                let _ = write!(out, "{sep}{cell:<w$}");
            }
            out.push('\n');
        };
        line(&self.headers);
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        line(&rule);
        for row in &self.rows {
            line(row);
        }
        out
    }
}

/// The report being written.
#[derive(Debug)]
pub struct Report {
    dir: PathBuf,
    markdown: String,
    scale: Scale,
}

impl Report {
    /// A report that will be written into `dir`.
    pub fn new(dir: impl Into<PathBuf>, scale: Scale) -> Self {
        Self {
            dir: dir.into(),
            markdown: String::new(),
            scale,
        }
    }

    /// The run's scale.
    pub fn scale(&self) -> Scale {
        self.scale
    }

    /// The folder that holds the report and its plots.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Start a section.
    pub fn section(&mut self, title: &str) {
        println!("\n## {title}\n");
        let _ = write!(self.markdown, "\n## {title}\n\n");
    }

    /// A paragraph of text.
    pub fn text(&mut self, text: &str) {
        println!("{text}\n");
        let _ = write!(self.markdown, "{text}\n\n");
    }

    /// A progress line: shown on the terminal, not kept in the report.
    pub fn progress(&self, text: &str) {
        eprintln!("  .. {text}");
    }

    /// A table, printed and kept.
    pub fn table(&mut self, table: &Table) {
        println!("{}", table.plain());
        let _ = writeln!(self.markdown, "{}", table.markdown());
    }

    /// Save a chart as `<file>.svg` in the report folder and show it in the
    /// report, its title as the image's alt text.
    pub fn plot(&mut self, file: &str, plot: &dyn crate::plot::Chart) {
        let name = format!("{file}.svg");
        match plot.save(&self.dir.join(&name)) {
            Ok(()) => {
                println!("(plot written: {})", self.dir.join(&name).display());
                let _ = write!(self.markdown, "![{}]({name})\n\n", plot.title());
            }
            Err(e) => self.text(&format!("(could not write plot {name}: {e})")),
        }
    }

    /// Write `report.md` into the report folder and return its path.
    pub fn finish(&self, header: &str) -> io::Result<PathBuf> {
        fs::create_dir_all(&self.dir)?;
        let path = self.dir.join("report.md");
        fs::write(&path, format!("{header}{}", self.markdown))?;
        Ok(path)
    }
}

/// The spread of one figure over repetitions: minimum, median, maximum.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// The smallest value.
    pub min: f64,
    /// The median (the mean of the middle two for an even count).
    pub median: f64,
    /// The largest value.
    pub max: f64,
}

impl Spread {
    /// The spread of `values` (at least one; NaNs sort last).
    ///
    /// # Panics
    ///
    /// If `values` is empty.
    pub fn of(values: &[f64]) -> Self {
        assert!(!values.is_empty(), "a spread needs at least one value");
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Self {
            min: sorted[0],
            median,
            max: sorted[n - 1],
        }
    }

    /// `min / median / max`, each written by `f` (a unit, a precision).
    pub fn show_each(&self, f: impl Fn(f64) -> String) -> String {
        format!("{} / {} / {}", f(self.min), f(self.median), f(self.max))
    }

    /// `median (min–max)` with `decimals` digits after the point.
    pub fn show(&self, decimals: usize) -> String {
        format!(
            "{:.d$} ({:.d$}–{:.d$})",
            self.median,
            self.min,
            self.max,
            d = decimals
        )
    }
}

/// A count with thousands separators, for tables.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(26_184), "26,184");
        assert_eq!(thousands(53_477_392), "53,477,392");
    }

    #[test]
    fn spread_is_min_median_max() {
        let s = Spread::of(&[3.0, 1.0, 2.0]);
        assert_eq!((s.min, s.median, s.max), (1.0, 2.0, 3.0));
        assert_eq!(Spread::of(&[4.0, 1.0, 2.0, 3.0]).median, 2.5);
        assert_eq!(s.show(1), "2.0 (1.0–3.0)");
    }

    #[test]
    fn markdown_table_has_a_rule_after_the_header() {
        let mut t = Table::new(["a", "b"]);
        t.row(["1", "2"]);
        assert_eq!(t.markdown(), "| a | b |\n| --- | --- |\n| 1 | 2 |\n");
    }
}
