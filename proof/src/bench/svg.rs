//! The `--svg` picture: per-request latency around one failover, one panel per policy, with
//! the kill and the moment the new primary was ready as vertical lines. Hand-written SVG.

use std::fmt::Write as _;
use std::path::Path;

use super::failover::{Policy, Round, Timeline};

const W: f64 = 1000.0;
const PANEL_H: f64 = 270.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 60.0;
const GAP: f64 = 70.0;
/// Requests longer than this also get a bar from their start to their end.
const LONG_MS: f64 = 20.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Writes the picture of `tl` to `path`.
pub fn write_timeline(path: &Path, tl: &Timeline) -> std::io::Result<()> {
    std::fs::write(path, render(tl))
}

/// The SVG text of `tl`: a title, then one panel per policy.
pub fn render(tl: &Timeline) -> String {
    let plot = Plot::of(tl);
    let h = TOP + 2.0 * PANEL_H + GAP + 60.0;
    let mut s = String::new();
    header(&mut s, tl, h);
    for (i, policy) in [Policy::Ours, Policy::Baseline].into_iter().enumerate() {
        let top = TOP + i as f64 * (PANEL_H + GAP) + 20.0;
        let panel = Panel {
            plot: &plot,
            policy,
            top,
            bottom: top + PANEL_H - 20.0,
            color: if policy == Policy::Ours {
                "#1f66b4"
            } else {
                "#c8322a"
            },
        };
        panel.title(&mut s, tl);
        panel.grid(&mut s);
        panel.marks(&mut s);
        panel.requests(&mut s);
    }
    s.push_str("</svg>\n");
    s
}

/// One request drawn: its policy, start and end (ms since the kill), latency (ms), success.
type Point = (Policy, f64, f64, f64, bool);

/// The requests and the axes every panel shares.
struct Plot {
    pts: Vec<Point>,
    /// kill → new primary ready, ms.
    ready_ms: Option<f64>,
    /// The time axis (ms since the kill).
    x_min: f64,
    x_max: f64,
    /// The latency axis, in decades (10^d_lo … 10^d_hi ms).
    d_lo: i32,
    d_hi: i32,
}

impl Plot {
    fn of(tl: &Timeline) -> Plot {
        let ready_ms = tl.ready.map(|r| Round::ms(tl.t_kill, r.sent));
        let pts: Vec<Point> = tl
            .samples
            .iter()
            .map(|s| {
                let start = Round::ms(tl.t_kill, s.start);
                let end = Round::ms(tl.t_kill, s.end);
                (s.policy, start, end, (end - start).max(1e-3), s.ok)
            })
            .collect();
        // Time axis: from 300 ms before the kill to a little after the last request, in whole 100s.
        let last = pts
            .iter()
            .map(|p| p.2)
            .fold(ready_ms.unwrap_or(0.0), f64::max);
        let lat_min = pts
            .iter()
            .map(|p| p.3)
            .fold(f64::INFINITY, f64::min)
            .max(1e-3);
        let lat_max = pts.iter().map(|p| p.3).fold(1.0, f64::max);
        Plot {
            pts,
            ready_ms,
            x_min: -300.0,
            x_max: ((last + 150.0) / 100.0).ceil() * 100.0,
            d_lo: lat_min.log10().floor() as i32,
            d_hi: lat_max.log10().ceil().max(1.0) as i32,
        }
    }

    fn plot_w(&self) -> f64 {
        W - LEFT - RIGHT
    }

    /// The x of `ms` since the kill.
    fn x(&self, ms: f64) -> f64 {
        LEFT + (ms - self.x_min) / (self.x_max - self.x_min) * self.plot_w()
    }
}

/// The picture's frame, background and title lines.
fn header(s: &mut String, tl: &Timeline, h: f64) {
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="DejaVu Sans, Arial, sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="16" font-weight="bold">One failover: latency of each hello around kill -9 of the primary</text>"#,
        W / 2.0
    );
    let _ = writeln!(
        s,
        r##"<text x="{}" y="44" text-anchor="middle" fill="#444">3 controllers on loopback, default timing; {} clients per policy, each calling hello every {} ms; both policies in the same failover</text>"##,
        W / 2.0,
        tl.clients_per_policy,
        tl.pace.as_millis()
    );
}

/// One policy's panel, between `top` and `bottom`.
struct Panel<'a> {
    plot: &'a Plot,
    policy: Policy,
    top: f64,
    bottom: f64,
    color: &'static str,
}

impl Panel<'_> {
    /// The y of a latency (ms, log scale).
    fn y(&self, lat: f64) -> f64 {
        let (d_lo, d_hi) = (self.plot.d_lo, self.plot.d_hi);
        let f = (lat.log10() - f64::from(d_lo)) / f64::from(d_hi - d_lo);
        self.bottom - f * (self.bottom - self.top)
    }

    /// Client-added delay: the latest first success after ready, over this policy's clients.
    fn worst_after_ready(&self, tl: &Timeline) -> Option<f64> {
        let r = self.plot.ready_ms?;
        let mut by_client = std::collections::BTreeMap::new();
        for smp in tl
            .samples
            .iter()
            .filter(|s| s.policy == self.policy && s.ok)
        {
            let end = Round::ms(tl.t_kill, smp.end);
            if end > r {
                let e = by_client.entry(smp.client).or_insert(end);
                *e = e.min(end);
            }
        }
        by_client
            .values()
            .copied()
            .fold(None, |a: Option<f64>, v| Some(a.map_or(v, |a| a.max(v))))
            .map(|v| v - r)
    }

    /// The policy's name, and how long after ready its last client first succeeded.
    fn title(&self, s: &mut String, tl: &Timeline) {
        let (top, color) = (self.top, self.color);
        let _ = writeln!(
            s,
            r#"<text x="{LEFT}" y="{}" font-size="14" font-weight="bold" fill="{color}">{}</text>"#,
            top - 8.0,
            esc(self.policy.name())
        );
        if let Some(w) = self.worst_after_ready(tl) {
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="end" fill="{color}">last client's first success: {:.0} ms after the new primary was ready</text>"#,
                W - RIGHT,
                top - 8.0,
                w
            );
        }
    }

    /// Frame, grid lines and their labels, the axes' titles.
    fn grid(&self, s: &mut String) {
        let (p, top, bottom) = (self.plot, self.top, self.bottom);
        let plot_w = p.plot_w();
        let _ = writeln!(
            s,
            r##"<rect x="{LEFT}" y="{top}" width="{plot_w}" height="{}" fill="#fafafa" stroke="#888"/>"##,
            bottom - top
        );
        for d in p.d_lo..=p.d_hi {
            let yy = self.y(10f64.powi(d));
            let label = 10f64.powi(d);
            let _ = writeln!(
                s,
                r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{}" y2="{yy:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{label}</text>"##,
                W - RIGHT,
                LEFT - 6.0,
                yy + 4.0
            );
        }
        let step = nice_step(p.x_max - p.x_min);
        let mut tick = (p.x_min / step).ceil() * step;
        while tick <= p.x_max {
            let xx = p.x(tick);
            let tick_label = tick + 0.0; // no "-0"
            let _ = writeln!(
                s,
                r##"<line x1="{xx:.1}" y1="{top}" x2="{xx:.1}" y2="{bottom}" stroke="#eee"/><text x="{xx:.1}" y="{}" text-anchor="middle">{tick_label:.0}</text>"##,
                bottom + 16.0
            );
            tick += step;
        }
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">time since the kill (ms); each request drawn at its end (• success, × error returned), long ones with a bar from their start</text>"#,
            LEFT + plot_w / 2.0,
            bottom + 34.0
        );
        let _ = writeln!(
            s,
            r#"<text transform="translate({},{}) rotate(-90)" text-anchor="middle">latency (ms, log scale)</text>"#,
            LEFT - 52.0,
            (top + bottom) / 2.0
        );
    }

    /// The kill and the moment the new primary was ready, as dashed vertical lines.
    fn marks(&self, s: &mut String) {
        let (p, top, bottom) = (self.plot, self.top, self.bottom);
        let _ = writeln!(
            s,
            r##"<line x1="{0:.1}" y1="{top}" x2="{0:.1}" y2="{bottom}" stroke="#000" stroke-width="1.5" stroke-dasharray="6,4"/><text x="{1:.1}" y="{2}" text-anchor="end">kill -9</text>"##,
            p.x(0.0),
            p.x(0.0) - 4.0,
            top + 14.0
        );
        if let Some(r) = p.ready_ms {
            let _ = writeln!(
                s,
                r##"<line x1="{0:.1}" y1="{top}" x2="{0:.1}" y2="{bottom}" stroke="#1a9a3a" stroke-width="1.5" stroke-dasharray="6,4"/><text x="{1:.1}" y="{2}" fill="#1a7a2a">new primary ready (+{3:.0} ms)</text>"##,
                p.x(r),
                p.x(r) + 4.0,
                top + 14.0,
                r
            );
        }
    }

    /// Each request of this policy at its end (• success, × error), long ones with a bar.
    fn requests(&self, s: &mut String) {
        let (p, color) = (self.plot, self.color);
        for &(_, start, end, lat, ok) in p.pts.iter().filter(|pt| pt.0 == self.policy) {
            if end < p.x_min {
                continue;
            }
            let (xe, yy) = (p.x(end), self.y(lat));
            if lat >= LONG_MS {
                let _ = writeln!(
                    s,
                    r#"<line x1="{:.1}" y1="{yy:.1}" x2="{xe:.1}" y2="{yy:.1}" stroke="{color}" stroke-opacity="0.35" stroke-width="2"/>"#,
                    p.x(start.max(p.x_min))
                );
            }
            if ok {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{xe:.1}" cy="{yy:.1}" r="2.2" fill="{color}"/>"#
                );
            } else {
                let _ = writeln!(
                    s,
                    r#"<path d="M{:.1},{:.1} l6,6 m0,-6 l-6,6" stroke="{color}" stroke-width="1.5"/>"#,
                    xe - 3.0,
                    yy - 3.0
                );
            }
        }
    }
}

/// A round tick step giving 6–12 ticks over `span`.
fn nice_step(span: f64) -> f64 {
    for s in [
        50.0, 100.0, 200.0, 250.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0,
    ] {
        if span / s <= 12.0 {
            return s;
        }
    }
    20000.0
}
