//! Charts as standalone SVG: a stacked area (occupancy against the L3 size) and lines
//! (bandwidth, IPC, MPKI), over a time axis in seconds from the start of the recording, each
//! with its legend inside (the file stands alone). The browser lays out the text, so no font
//! metrics are needed here (why this is written out rather than drawn with a plotting crate,
//! whose text layout needs a font backend).

use std::fmt::Write;

pub const WIDTH: f64 = 960.0;
pub const HEIGHT: f64 = 280.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 34.0;
const BOTTOM: f64 = 42.0;

/// Distinguishable colours (Tableau 10), given to containers in order.
pub const PALETTE: [&str; 10] =
    ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];

/// Text for XML: markup escaped, control characters shown as `\xNN`, never raw.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if c.is_control() => {
                let _ = write!(o, "\\x{:02x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o
}

/// Text for a terminal: control characters shown as `\xNN`, never raw.
pub fn printable(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() {
            let _ = write!(o, "\\x{:02x}", c as u32);
        } else {
            o.push(c);
        }
    }
    o
}

/// `s` cut to `max` characters from the middle (both ends say most about a name).
pub fn shorten(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max || max < 3 {
        return s.to_string();
    }
    let head = (max - 1) / 2;
    let tail = max - 1 - head;
    let mut o: String = s.chars().take(head).collect();
    o.push('…');
    o.extend(s.chars().skip(n - tail));
    o
}

/// A round step for about `n` ticks over `span`.
fn nice_step(span: f64, n: f64) -> f64 {
    let raw = (span / n).max(f64::MIN_POSITIVE);
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag)
}

fn fmt_num(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 || v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// One series: a name, its colour, its value at the end of each bucket (in the chart's unit).
pub struct Series<'a> {
    pub name: &'a str,
    pub color: &'a str,
    pub values: Vec<Option<f64>>,
}

/// A time span to mark over the plot, in buckets [from, to], with a label.
pub struct Band {
    pub from: usize,
    pub to: usize,
    pub label: String,
}

pub struct Chart<'a> {
    pub title: &'a str,
    pub unit: &'a str,
    /// Seconds from the start of the recording at the end of each bucket.
    pub x: Vec<f64>,
    pub bucket_s: f64,
    pub series: Vec<Series<'a>>,
    pub stacked: bool,
    /// A horizontal limit (the L3 size), labelled.
    pub cap: Option<(f64, String)>,
    /// Grey bands (periods without an RMID).
    pub shaded: Vec<Band>,
    /// Red outlined bands (noisy-neighbour episodes).
    pub marked: Vec<Band>,
}

impl Chart<'_> {
    pub fn render(&self) -> String {
        let (pw, ph) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
        let n = self.x.len();
        let x_max = self.x.last().copied().unwrap_or(1.0).max(self.bucket_s);
        let x_min = (self.x.first().copied().unwrap_or(0.0) - self.bucket_s).max(0.0);
        // Stacked: cumulative tops per series.
        let mut tops: Vec<Vec<f64>> = Vec::new();
        let mut base = vec![0.0; n];
        for s in &self.series {
            let top: Vec<f64> = (0..n)
                .map(|k| {
                    let v = s.values.get(k).copied().flatten().unwrap_or(0.0);
                    if self.stacked {
                        base[k] + v
                    } else {
                        v
                    }
                })
                .collect();
            if self.stacked {
                base.clone_from(&top);
            }
            tops.push(top);
        }
        let data_max = tops.iter().flatten().copied().fold(0.0f64, f64::max);
        let y_max = (data_max.max(self.cap.as_ref().map_or(0.0, |c| c.0)) * 1.08).max(1e-9);
        let sx = |x: f64| LEFT + (x - x_min) / (x_max - x_min).max(1e-9) * pw;
        let sy = |y: f64| TOP + ph - (y / y_max) * ph;
        let mut o = String::new();
        let _ = write!(
            o,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="DejaVu Sans, Arial, sans-serif" font-size="12">"#
        );
        let _ = write!(o, r#"<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>"#);
        let _ = write!(o, r#"<text x="{LEFT}" y="20" font-size="14" font-weight="bold">{}</text>"#, escape(self.title));
        // Grid and axes.
        let ys = nice_step(y_max, 5.0);
        let mut y = 0.0;
        while y <= y_max {
            let py = sy(y);
            let _ = write!(
                o,
                r##"<line x1="{LEFT}" x2="{:.1}" y1="{py:.1}" y2="{py:.1}" stroke="#e0e0e0"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                LEFT + pw,
                LEFT - 6.0,
                py + 4.0,
                fmt_num(y)
            );
            y += ys;
        }
        let xs = nice_step(x_max - x_min, 8.0);
        let mut x = (x_min / xs).ceil() * xs;
        while x <= x_max + 1e-9 {
            let px = sx(x);
            let _ = write!(
                o,
                r##"<line x1="{px:.1}" x2="{px:.1}" y1="{TOP}" y2="{:.1}" stroke="#f0f0f0"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                TOP + ph,
                TOP + ph + 16.0,
                fmt_num(x)
            );
            x += xs;
        }
        let _ = write!(
            o,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">seconds from the start</text><text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle">{}</text>"#,
            LEFT + pw / 2.0,
            HEIGHT - 6.0,
            TOP + ph / 2.0,
            TOP + ph / 2.0,
            escape(self.unit)
        );
        let band_x = |b: &Band| {
            let x0 = sx(self.x.get(b.from).copied().unwrap_or(0.0) - self.bucket_s);
            let x1 = sx(self.x.get(b.to).copied().unwrap_or(0.0));
            (x0, (x1 - x0).max(1.0))
        };
        for b in &self.shaded {
            let (x0, w) = band_x(b);
            let _ = write!(
                o,
                r##"<rect class="no-rmid" x="{x0:.1}" y="{TOP}" width="{w:.1}" height="{ph:.1}" fill="#999" fill-opacity="0.25"><title>{}</title></rect>"##,
                escape(&b.label)
            );
        }
        // The series.
        for (i, s) in self.series.iter().enumerate() {
            if n == 0 {
                break;
            }
            let color = escape(s.color);
            let pts = |v: &[f64]| -> String {
                v.iter()
                    .enumerate()
                    .map(|(k, y)| format!("{:.1},{:.1}", sx(self.x[k]), sy(*y)))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            if self.stacked {
                let lower: Vec<f64> = if i == 0 { vec![0.0; n] } else { tops[i - 1].clone() };
                let mut poly = pts(&tops[i]);
                let back: Vec<String> =
                    (0..n).rev().map(|k| format!("{:.1},{:.1}", sx(self.x[k]), sy(lower[k]))).collect();
                poly.push(' ');
                poly.push_str(&back.join(" "));
                let _ = write!(
                    o,
                    r#"<polygon class="series" data-name="{}" points="{poly}" fill="{color}"/>"#,
                    escape(s.name)
                );
            } else {
                // Lines break where nothing was measured.
                let mut run: Vec<String> = Vec::new();
                let flush = |run: &mut Vec<String>, o: &mut String| {
                    if run.len() > 1 {
                        let _ = write!(
                            o,
                            r#"<polyline class="series" data-name="{}" points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
                            escape(s.name),
                            run.join(" ")
                        );
                    } else if let Some(p) = run.first() {
                        let (cx, cy) = p.split_once(',').unwrap_or(("0", "0"));
                        let _ = write!(o, r#"<circle class="series" cx="{cx}" cy="{cy}" r="2" fill="{color}"/>"#);
                    }
                    run.clear();
                };
                for k in 0..n {
                    match s.values.get(k).copied().flatten() {
                        Some(v) => run.push(format!("{:.1},{:.1}", sx(self.x[k]), sy(v))),
                        None => flush(&mut run, &mut o),
                    }
                }
                flush(&mut run, &mut o);
            }
        }
        if let Some((cap, label)) = &self.cap {
            let py = sy(*cap);
            let _ = write!(
                o,
                r##"<line x1="{LEFT}" x2="{:.1}" y1="{py:.1}" y2="{py:.1}" stroke="#222" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#222">{}</text>"##,
                LEFT + pw,
                LEFT + pw - 4.0,
                py - 4.0,
                escape(label)
            );
        }
        for (i, b) in self.marked.iter().enumerate() {
            let (x0, w) = band_x(b);
            let _ = write!(
                o,
                r##"<rect class="episode" x="{x0:.1}" y="{:.1}" width="{w:.1}" height="{:.1}" fill="none" stroke="#d00" stroke-width="2"><title>{}</title></rect><text x="{:.1}" y="{:.1}" fill="#d00" font-weight="bold">{}</text>"##,
                TOP + 1.0,
                ph - 2.0,
                escape(&b.label),
                x0 + 3.0,
                TOP + 14.0,
                i + 1
            );
        }
        let _ =
            write!(o, r##"<rect x="{LEFT}" y="{TOP}" width="{pw:.1}" height="{ph:.1}" fill="none" stroke="#888"/>"##);
        // Legend, top first as stacked (the last series is drawn on top).
        let lx = LEFT + pw + 14.0;
        let order: Vec<usize> =
            if self.stacked { (0..self.series.len()).rev().collect() } else { (0..self.series.len()).collect() };
        for (row, i) in order.into_iter().enumerate() {
            let s = &self.series[i];
            let ly = TOP + 8.0 + row as f64 * 18.0;
            if ly > HEIGHT - 10.0 {
                let _ = write!(o, r#"<text x="{lx:.1}" y="{ly:.1}">… {} more</text>"#, self.series.len() - row);
                break;
            }
            let _ = write!(
                o,
                r#"<g class="legend"><rect x="{lx:.1}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{:.1}">{}<title>{}</title></text></g>"#,
                ly - 10.0,
                escape(s.color),
                lx + 18.0,
                ly,
                escape(&shorten(s.name, 24)),
                escape(s.name)
            );
        }
        if !self.shaded.is_empty() {
            let ly = HEIGHT - 14.0;
            let _ = write!(
                o,
                r##"<rect x="{lx:.1}" y="{:.1}" width="12" height="12" fill="#999" fill-opacity="0.4"/><text x="{:.1}" y="{ly:.1}">no RMID</text>"##,
                ly - 10.0,
                lx + 18.0
            );
        }
        o.push_str("</svg>");
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_escaped_and_shortened_from_the_middle() {
        assert_eq!(escape("a<b>&\"c'\x1b[31m"), "a&lt;b&gt;&amp;&quot;c&#39;\\x1b[31m");
        assert_eq!(shorten("0123456789abcdef", 9), "0123…cdef");
        assert_eq!(shorten("short", 9), "short");
    }

    #[test]
    fn a_stacked_chart_draws_each_series_and_the_cap() {
        let c = Chart {
            title: "t",
            unit: "MiB",
            x: vec![0.1, 0.2, 0.3],
            bucket_s: 0.1,
            series: vec![
                Series { name: "a", color: PALETTE[0], values: vec![Some(1.0), Some(2.0), None] },
                Series { name: "<b>", color: PALETTE[1], values: vec![Some(1.0), Some(1.0), Some(1.0)] },
            ],
            stacked: true,
            cap: Some((4.0, "L3 4 MiB".into())),
            shaded: vec![Band { from: 1, to: 2, label: "no RMID: a".into() }],
            marked: vec![Band { from: 0, to: 1, label: "episode".into() }],
        };
        let svg = c.render();
        assert_eq!(svg.matches("<polygon class=\"series\"").count(), 2);
        assert!(svg.contains("data-name=\"&lt;b&gt;\"") && !svg.contains("<b>"));
        assert!(svg.contains("L3 4 MiB") && svg.contains("class=\"no-rmid\"") && svg.contains("class=\"episode\""));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
    }
}
