//! The report: Markdown written to a folder under `target/`, every table
//! also printed to the terminal as it is produced, under a progress bar
//! of the run (on stderr, drawn only when it is a terminal).

use crate::harness::plot::Chart;
use indicatif::{HumanDuration, ProgressBar, ProgressState, ProgressStyle};
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How big a run is: `--quick` for a few minutes, full for the blog's scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// A few minutes for the whole report.
    Quick,
    /// The blog's 100 M events.
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
    /// A table whose headers are written as a Markdown row: `"a | b | c"`.
    pub fn new(headers: &str) -> Self {
        Self::with_headers(headers.split(" | "))
    }

    /// A table with these column headers.
    pub fn with_headers(headers: impl IntoIterator<Item = impl Into<String>>) -> Self {
        let headers = headers.into_iter().map(Into::into).collect();
        let rows = Vec::new();
        Self { headers, rows }
    }

    /// Append a row written as a Markdown row, `"1 | 2 | 3"`.
    pub fn row(&mut self, row: impl AsRef<str>) {
        self.cells(row.as_ref().split(" | "));
    }

    /// Append a row of cells, one per header.
    pub fn cells(&mut self, cells: impl IntoIterator<Item = impl Into<String>>) {
        let row: Vec<String> = cells.into_iter().map(Into::into).collect();
        assert_eq!(
            row.len(),
            self.headers.len(),
            "row width must match headers: {row:?}"
        );
        self.rows.push(row);
    }

    /// The table as GitHub-flavoured Markdown.
    pub fn markdown(&self) -> String {
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        let rule = line(&vec!["---".to_owned(); self.headers.len()]);
        let rows = self.rows.iter().map(|r| line(r));
        line(&self.headers) + &rule + &rows.collect::<String>()
    }

    /// The table as aligned plain text for the terminal.
    pub fn plain(&self) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        let lines = [&self.headers, &rule].into_iter().chain(&self.rows);
        let line = |cells: &Vec<String>| {
            let cells = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}"));
            cells.collect::<Vec<_>>().join("  ").trim_end().to_owned() + "\n"
        };
        lines.map(line).collect()
    }
}

/// The report being written.
#[derive(Debug)]
pub struct Report {
    dir: PathBuf,
    markdown: String,
    scale: Scale,
    plots: Vec<String>,
    bar: ProgressBar,
    /// The running section: its name, the bar's position when it began,
    /// its estimated seconds, and when it began.
    section: (&'static str, u64, u64, Instant),
}

impl Report {
    /// A report that will be written into `dir`, its sections estimated to
    /// take `estimate` in all (the progress bar's length).
    pub fn new(dir: impl Into<PathBuf>, scale: Scale, estimate: Duration) -> Self {
        // The bar counts estimated seconds, so what is left is its length
        // less its position (indicatif's own estimate needs a history first).
        let bar = ProgressBar::new(estimate.as_secs().max(1));
        let left = |s: &ProgressState, w: &mut dyn std::fmt::Write| {
            let left = s.len().unwrap_or(0).saturating_sub(s.pos());
            let _ = write!(w, "{:#}", HumanDuration(Duration::from_secs(left)));
        };
        let style = ProgressStyle::with_template(
            "{elapsed:>4} [{bar:30}] {percent:>3}%, about {left} left: {msg}",
        );
        let style = style.expect("a valid template").with_key("left", left);
        bar.set_style(style.progress_chars("=> "));
        bar.enable_steady_tick(Duration::from_millis(200));
        let (dir, markdown, plots, section) = (
            dir.into(),
            String::new(),
            Vec::new(),
            ("", 0, 0, Instant::now()),
        );
        Self {
            dir,
            markdown,
            scale,
            plots,
            bar,
            section,
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

    /// Mark the start of area `name` (for `--only`), estimated to take
    /// `estimate`: the progress bar shows it, and moves past the area before.
    pub fn begin(&mut self, name: &'static str, estimate: Duration) {
        let position = self.section.1 + self.section.2;
        self.section = (name, position, estimate.as_secs(), Instant::now());
        self.progress("starting");
    }

    /// Show what runs now on the progress bar (not kept in the report).
    pub fn progress(&self, text: &str) {
        let (name, start, estimate, began) = self.section;
        // Within an area the bar follows the clock, short of the area's
        // end: the estimate is only an estimate.
        let elapsed = began.elapsed().as_secs().min(estimate * 9 / 10);
        self.bar.set_position(start + elapsed);
        self.bar.set_message(format!("{name}: {text}"));
    }

    fn print(&self, text: &str) {
        self.bar.suspend(|| println!("{text}"));
    }

    /// Start a section.
    pub fn section(&mut self, title: &str) {
        self.print(&format!("\n## {title}\n"));
        let _ = write!(self.markdown, "\n## {title}\n\n");
    }

    /// A paragraph of text.
    pub fn text(&mut self, text: &str) {
        self.print(&format!("{text}\n"));
        let _ = write!(self.markdown, "{text}\n\n");
    }

    /// A table, printed and kept.
    pub fn table(&mut self, table: &Table) {
        self.print(&table.plain());
        let _ = writeln!(self.markdown, "{}", table.markdown());
    }

    /// Save a chart as `<file>.svg` in the report folder and show it in the
    /// report, its title as the image's alt text.
    pub(crate) fn plot(&mut self, file: &str, plot: &dyn Chart) {
        let name = format!("{file}.svg");
        let svg = plot.svg();
        let saved = svg.and_then(|svg| {
            std::fs::create_dir_all(&self.dir).and(std::fs::write(self.dir.join(&name), svg))
        });
        match saved {
            Ok(()) => {
                let _ = write!(self.markdown, "![{}]({name})\n\n", plot.title());
                self.plots.push(name);
            }
            Err(e) => self.text(&format!("(could not write plot {name}: {e})")),
        }
    }

    /// Write `report.md` into the report folder, clear the progress bar,
    /// and return the report's path and the plots written.
    pub fn finish(&self, header: &str) -> io::Result<(PathBuf, &[String])> {
        self.bar.finish_and_clear();
        std::fs::create_dir_all(&self.dir)?;
        let path = self.dir.join("report.md");
        std::fs::write(&path, format!("{header}{}", self.markdown))?;
        Ok((path, &self.plots))
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

/// `n` and its share of `of`: `1,234 (5.000 %)`.
pub fn share(n: u64, of: u64, decimals: usize) -> String {
    format!(
        "{} ({:.decimals$} %)",
        thousands(n),
        n as f64 * 100.0 / of.max(1) as f64
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(
            [0, 999, 1_000, 53_477_392].map(thousands),
            ["0", "999", "1,000", "53,477,392"]
        );
    }

    #[test]
    fn tables_render_as_markdown_and_aligned_text() {
        let mut t = Table::new("a | bb");
        t.row("1 | 2");
        t.cells(["333", "4"]);
        assert_eq!(
            t.markdown(),
            "| a | bb |\n| --- | --- |\n| 1 | 2 |\n| 333 | 4 |\n"
        );
        assert_eq!(t.plain(), "a    bb\n---  --\n1    2\n333  4\n");
    }

    #[test]
    #[should_panic(expected = "row width must match headers")]
    fn a_row_of_the_wrong_width_is_refused() {
        Table::new("a | b").row("1");
    }
}
