//! One printed table per benchmark: a title, notes, rows of a distribution (or free columns),
//! and the closing `target: … — MET/NOT MET (…)` line.

use std::fmt;

use super::Summary;

/// Whether a target was reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Met(String),
    NotMet(String),
    /// The measurement could not be made (a cluster that never elected, …).
    NotMeasured(String),
}

impl Verdict {
    /// `Met` when `ok`, with `detail` saying by how much either way.
    pub fn from(ok: bool, detail: String) -> Verdict {
        if ok {
            Verdict::Met(detail)
        } else {
            Verdict::NotMet(detail)
        }
    }

    pub fn is_met(&self) -> bool {
        matches!(self, Verdict::Met(_))
    }
}

/// A benchmark's result as printed.
#[derive(Debug, Clone)]
pub struct Table {
    pub id: &'static str,
    pub title: String,
    /// Lines printed under the title (setup, method, caveats).
    pub notes: Vec<String>,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// Lines printed after the rows (ratios, derived numbers).
    pub results: Vec<String>,
    /// `(target text, verdict)`; one line each.
    pub targets: Vec<(String, Verdict)>,
}

impl Table {
    pub fn new(id: &'static str, title: impl Into<String>) -> Table {
        Table {
            id,
            title: title.into(),
            notes: Vec::new(),
            header: Vec::new(),
            rows: Vec::new(),
            results: Vec::new(),
            targets: Vec::new(),
        }
    }

    pub fn note(&mut self, s: impl Into<String>) {
        self.notes.push(s.into());
    }

    pub fn result(&mut self, s: impl Into<String>) {
        self.results.push(s.into());
    }

    pub fn target(&mut self, what: impl Into<String>, v: Verdict) {
        self.targets.push((what.into(), v));
    }

    /// The header of free columns.
    pub fn columns(&mut self, names: &[&str]) {
        self.header = names.iter().map(|s| s.to_string()).collect();
    }

    /// Header for distribution rows: `what | p50 | p90 | p99 | max | n` in `unit`.
    pub fn dist_header(&mut self, first: &str, unit: &str) {
        self.header = vec![
            first.to_string(),
            format!("p50 {unit}"),
            format!("p90 {unit}"),
            format!("p99 {unit}"),
            format!("max {unit}"),
            "n".to_string(),
        ];
    }

    /// A distribution row; `None` prints dashes.
    pub fn dist_row(&mut self, what: impl Into<String>, s: Option<Summary>) {
        let mut row = vec![what.into()];
        match s {
            Some(s) => {
                row.extend([s.p50, s.p90, s.p99, s.max].map(num));
                row.push(s.n.to_string());
            }
            None => row.extend(["-", "-", "-", "-", "0"].map(String::from)),
        }
        self.rows.push(row);
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Whether every target line is met.
    pub fn all_met(&self) -> bool {
        self.targets.iter().all(|(_, v)| v.is_met())
    }
}

/// A number with 3 significant-ish digits, in plain notation.
pub fn num(x: f64) -> String {
    let a = x.abs();
    if a >= 1000.0 {
        format!("{x:.0}")
    } else if a >= 100.0 {
        format!("{x:.1}")
    } else if a >= 10.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "== {} {} ==", self.id, self.title)?;
        for n in &self.notes {
            writeln!(f, "   {n}")?;
        }
        if !self.header.is_empty() || !self.rows.is_empty() {
            let ncol = self
                .rows
                .iter()
                .map(Vec::len)
                .chain(std::iter::once(self.header.len()))
                .max()
                .unwrap_or(0);
            let mut w = vec![0usize; ncol];
            for r in std::iter::once(&self.header).chain(&self.rows) {
                for (i, c) in r.iter().enumerate() {
                    w[i] = w[i].max(c.chars().count());
                }
            }
            let line = |f: &mut fmt::Formatter<'_>, r: &[String]| -> fmt::Result {
                write!(f, "  |")?;
                for (i, wi) in w.iter().enumerate() {
                    let c = r.get(i).map(String::as_str).unwrap_or("");
                    let pad = wi - c.chars().count();
                    if i == 0 {
                        write!(f, " {c}{} |", " ".repeat(pad))?;
                    } else {
                        write!(f, " {}{c} |", " ".repeat(pad))?;
                    }
                }
                writeln!(f)
            };
            if !self.header.is_empty() {
                line(f, &self.header)?;
                write!(f, "  |")?;
                for (i, wi) in w.iter().enumerate() {
                    if i == 0 {
                        write!(f, "{}|", "-".repeat(wi + 2))?;
                    } else {
                        write!(f, "{}:|", "-".repeat(wi + 1))?;
                    }
                }
                writeln!(f)?;
            }
            for r in &self.rows {
                line(f, r)?;
            }
        }
        for r in &self.results {
            writeln!(f, "   {r}")?;
        }
        for (what, v) in &self.targets {
            let (word, detail) = match v {
                Verdict::Met(d) => ("MET", d),
                Verdict::NotMet(d) => ("NOT MET", d),
                Verdict::NotMeasured(d) => ("NOT MEASURED", d),
            };
            writeln!(f, "   target: {what} — {word} ({detail})")?;
        }
        Ok(())
    }
}
