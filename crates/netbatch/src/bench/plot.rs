//! `netbatch bench --plot FILE`: the results as a picture, SVG or PNG by the file's
//! extension (any other extension is an error, found before anything is measured).
//!
//! The upper panel has one horizontal bar per variant, in the order of the table: the
//! bar's length is the median throughput, its whisker spans the slowest to the fastest
//! repetition, and the median is written at its end; colour tells the batch mode. The
//! lower panel has one bar per list variant that has a per-packet twin: the ratio of the
//! medians (written at its end, as `3.37×`), its whisker the ratio's spread as
//! [`list_packet_ratios`] defines it, and a line at 1 (no gain); a scenario that repeats
//! a seed's experiment has the seed's ratio marked across its bar in red ("seed 1.27×":
//! the kernel series' figure, `seeds`). Variants are never
//! dropped from the picture; a number that is not finite (a ratio over a zero rate) is
//! drawn without its bar or whisker.
//!
//! plotters is built without system fonts, so text is measured and drawn with
//! DejaVu Sans, embedded in the binary (`assets/`, its licence beside it).

use std::path::Path;
use std::sync::OnceLock;

use anyhow::{Context, anyhow, bail};
use netbatch_engine::Mode;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::summary::{Ratio, Summary, list_packet_ratios};

/// The picture formats `--plot` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Svg,
    Png,
}

/// The format `path`'s extension asks for (`.svg` or `.png`, any case).
pub(crate) fn format_of(path: &Path) -> anyhow::Result<Format> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("svg") => Ok(Format::Svg),
        Some("png") => Ok(Format::Png),
        Some(other) => bail!(
            "--plot {}: unknown picture format '.{other}' (use a .svg or .png file name)",
            path.display()
        ),
        None => bail!(
            "--plot {}: no file extension to choose the format by (use .svg or .png)",
            path.display()
        ),
    }
}

/// The font plotters draws with (its family name).
const FONT: &str = "sans-serif";
static FONT_BYTES: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

/// Registers the embedded font under [`FONT`] once per process.
fn register_font() -> anyhow::Result<()> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, FONT_BYTES).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(anyhow!(
            "the embedded font (DejaVuSans.ttf) could not be read"
        ))
    }
}

/// Text drawn above the panels.
pub(crate) struct Heading {
    pub(crate) title: String,
    /// Smaller lines under the title (what was run, how it is summarised).
    pub(crate) lines: Vec<String>,
}

const WIDTH: u32 = 1200;
/// Height of one bar's row.
const ROW: u32 = 26;
/// A panel's caption above and axis below its rows.
const PANEL_EXTRA: u32 = 100;
const HEADING_LINE: u32 = 20;
/// Font size of the heading's lines.
const HEADING_SIZE: u32 = 14;

const PACKET: RGBColor = RGBColor(230, 126, 34);
const LIST: RGBColor = RGBColor(41, 128, 185);
const NO_MODE: RGBColor = RGBColor(127, 140, 141);
const RATIO: RGBColor = RGBColor(39, 174, 96);
const SEED: RGBColor = RGBColor(192, 57, 43);
const BAND: RGBColor = RGBColor(242, 244, 246);
const GRID: RGBColor = RGBColor(215, 219, 221);

fn mode_colour(m: Option<Mode>) -> RGBColor {
    match m {
        Some(Mode::Packet) => PACKET,
        Some(Mode::List) => LIST,
        None => NO_MODE,
    }
}

/// One bar of a panel.
struct Bar {
    label: String,
    /// Where in the table's grouping it belongs (alternate groups are shaded).
    group: String,
    median: f64,
    min: f64,
    max: f64,
    colour: RGBColor,
    text: String,
    /// The seed's figure for this bar, marked with a line (the seeds' experiments only).
    seed: Option<f64>,
}

/// Draws `rows` (and their list/packet ratios) to `path`, in the format its extension
/// names.
pub(crate) fn plot(path: &Path, rows: &[Summary], heading: &Heading) -> anyhow::Result<()> {
    let format = format_of(path)?;
    register_font()?;
    let ratios = list_packet_ratios(rows);
    // Heading lines as wide as the picture's margins let them be, measured in its font.
    let font = (FONT, HEADING_SIZE).into_font();
    let fits = |t: &str| font.box_size(t).is_ok_and(|(w, _)| w + 32 <= WIDTH);
    let lines: Vec<String> = heading.lines.iter().flat_map(|l| wrap(l, fits)).collect();
    let heading = &Heading {
        title: heading.title.clone(),
        lines,
    };
    let height = HEADING_LINE * (2 + heading.lines.len() as u32)
        + panel_height(rows.len())
        + if ratios.is_empty() {
            0
        } else {
            panel_height(ratios.len())
        };
    let what = || format!("drawing {}", path.display());
    match format {
        Format::Svg => {
            let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
            draw(&root, rows, &ratios, heading).with_context(what)?;
            root.present()
                .map_err(|e| anyhow!("{e}"))
                .with_context(what)?;
        }
        Format::Png => {
            let root = BitMapBackend::new(path, (WIDTH, height)).into_drawing_area();
            draw(&root, rows, &ratios, heading).with_context(what)?;
            root.present()
                .map_err(|e| anyhow!("{e}"))
                .with_context(what)?;
        }
    }
    Ok(())
}

/// Breaks `line` at spaces into lines whose width by `fits` is acceptable (a word too
/// wide on its own stays whole on its own line).
fn wrap(line: &str, fits: impl Fn(&str) -> bool) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut cur = String::new();
    for word in line.split(' ') {
        if !cur.is_empty() && !fits(&format!("{cur} {word}")) {
            out.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(word);
    }
    out.push(cur);
    out
}

fn panel_height(bars: usize) -> u32 {
    PANEL_EXTRA + ROW * bars.max(1) as u32
}

/// A plotters error as an `anyhow` error (its types are generic over the backend; the
/// message is what is kept).
fn err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("{e}")
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    rows: &[Summary],
    ratios: &[Ratio],
    heading: &Heading,
) -> anyhow::Result<()> {
    root.fill(&WHITE).map_err(err)?;
    let title = TextStyle::from((FONT, 22).into_font());
    let small = TextStyle::from((FONT, HEADING_SIZE).into_font()).color(&BLACK);
    root.draw_text(&heading.title, &title, (16, 8))
        .map_err(err)?;
    for (i, line) in heading.lines.iter().enumerate() {
        root.draw_text(line, &small, (16, 36 + HEADING_LINE as i32 * i as i32))
            .map_err(err)?;
    }
    // Legend at the right of the title line.
    let mut x = WIDTH as i32 - 16;
    for (name, colour) in [
        ("no batch modes", NO_MODE),
        ("list mode", LIST),
        ("per-packet mode", PACKET),
    ]
    .iter()
    .filter(|(_, c)| *c != NO_MODE || rows.iter().any(|r| r.v.mode.is_none()))
    {
        let (w, _) = root.estimate_text_size(name, &small).map_err(err)?;
        x -= w as i32;
        root.draw_text(name, &small, (x, 12)).map_err(err)?;
        x -= 20;
        root.draw(&Rectangle::new([(x, 12), (x + 14, 26)], colour.filled()))
            .map_err(err)?;
        x -= 18;
    }
    let top = HEADING_LINE * (2 + heading.lines.len() as u32);
    let (_, below) = root.split_vertically(top);
    let (upper, lower) = below.split_vertically(panel_height(rows.len()));

    let bars: Vec<Bar> = rows
        .iter()
        .map(|r| Bar {
            label: r.label(),
            group: r.v.scenario.clone(),
            median: r.mpps.median,
            min: r.mpps.min,
            max: r.mpps.max,
            colour: mode_colour(r.v.mode),
            text: format!("{:.2}", r.mpps.median),
            seed: None,
        })
        .collect();
    let runs = rows.iter().map(|r| r.runs).max().unwrap_or(0);
    panel(
        root,
        &upper,
        &format!("Throughput: median of {runs} repetitions, whiskers from slowest to fastest"),
        "Mpps (millions of packets per second)",
        &bars,
        None,
    )?;
    if !ratios.is_empty() {
        let bars: Vec<Bar> = ratios
            .iter()
            .map(|r| {
                let l = &rows[r.list];
                Bar {
                    label: l.pair_label(),
                    group: l.v.scenario.clone(),
                    median: r.spread.median,
                    min: r.spread.min,
                    max: r.spread.max,
                    colour: RATIO,
                    text: format!("{:.2}×", r.spread.median),
                    seed: super::seeds::list_seed(&l.v.scenario).map(super::seeds::Seed::ratio),
                }
            })
            .collect();
        panel(
            root,
            &lower,
            "List mode / per-packet mode throughput: ratio of medians, \
             whiskers from (slowest list / fastest packet) to (fastest list / slowest packet); \
             red: the seed's ratio (Linux)",
            "list / packet (×)",
            &bars,
            Some(1.0),
        )?;
    }
    Ok(())
}

/// One panel of horizontal bars with whiskers; labels are drawn on `root` (in backend
/// coordinates) left of the plotting area, so none is skipped or reflowed by the axis.
fn panel<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    area: &DrawingArea<DB, Shift>,
    caption: &str,
    x_desc: &str,
    bars: &[Bar],
    reference: Option<f64>,
) -> anyhow::Result<()> {
    let label_style = TextStyle::from((FONT, 14).into_font())
        .color(&BLACK)
        .pos(Pos::new(HPos::Right, VPos::Center));
    let value_style = TextStyle::from((FONT, 13).into_font())
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    let mut label_w = 0;
    for b in bars {
        label_w = label_w.max(
            root.estimate_text_size(&b.label, &label_style)
                .map_err(err)?
                .0,
        );
    }
    let finite = |x: f64| x.is_finite().then_some(x);
    let top = bars
        .iter()
        .filter_map(|b| finite(b.max.max(b.median)))
        .chain(bars.iter().filter_map(|b| b.seed))
        .chain(reference)
        .fold(0.0f64, f64::max);
    // Room right of the longest whisker for its number.
    let x_end = if top > 0.0 { top * 1.18 } else { 1.0 };
    let n = bars.len().max(1) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 16))
        .margin_left(8)
        .margin_right(24)
        .margin_top(6)
        .margin_bottom(6)
        .x_label_area_size(44)
        .y_label_area_size(label_w + 20)
        .build_cartesian_2d(0.0..x_end, 0.0..n)
        .map_err(err)?;
    // Row k is drawn from the top, centred at n - k - 0.5.
    let y_of = |k: usize| n - k as f64 - 0.5;
    // Alternate scenarios are shaded, under the grid.
    let mut shaded = false;
    let mut group = None;
    for (k, b) in bars.iter().enumerate() {
        if group != Some(&b.group) {
            shaded = !shaded && group.is_some();
            group = Some(&b.group);
        }
        if shaded {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(0.0, y_of(k) - 0.5), (x_end, y_of(k) + 0.5)],
                    BAND.filled(),
                )))
                .map_err(err)?;
        }
    }
    let tick = |v: &f64| {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_labels(10)
        .x_label_formatter(&tick)
        .x_desc(x_desc)
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 14))
        .bold_line_style(GRID)
        .light_line_style(TRANSPARENT)
        .draw()
        .map_err(err)?;
    if let Some(r) = reference {
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(r, 0.0), (r, n)],
                BLACK.stroke_width(1),
            )))
            .map_err(err)?;
    }
    for (k, b) in bars.iter().enumerate() {
        let y = y_of(k);
        if let Some(m) = finite(b.median) {
            let mut bar = Rectangle::new([(0.0, y - 0.5), (m, y + 0.5)], b.colour.filled());
            bar.set_margin(4, 4, 0, 0);
            chart.draw_series(std::iter::once(bar)).map_err(err)?;
            if let (Some(lo), Some(hi)) = (finite(b.min), finite(b.max)) {
                // The whisker: a line from min to max, capped at both ends (plotters'
                // ErrorBar is behind a feature this build does not enable).
                let style = BLACK.stroke_width(1);
                let cap = 0.22;
                chart
                    .draw_series([
                        PathElement::new(vec![(lo, y), (hi, y)], style),
                        PathElement::new(vec![(lo, y - cap), (lo, y + cap)], style),
                        PathElement::new(vec![(hi, y - cap), (hi, y + cap)], style),
                    ])
                    .map_err(err)?;
            }
            let end = finite(b.max).unwrap_or(m).max(m);
            let at = chart.backend_coord(&(end, y));
            root.draw_text(&b.text, &value_style, (at.0 + 8, at.1))
                .map_err(err)?;
        }
        if let Some(seed) = b.seed {
            // The seed's ratio: a red line across the row, named at its top.
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(seed, y - 0.5), (seed, y + 0.5)],
                    SEED.stroke_width(3),
                )))
                .map_err(err)?;
            let at = chart.backend_coord(&(seed, y + 0.5));
            root.draw_text(
                &format!("seed {seed:.2}×"),
                &TextStyle::from((FONT, 12).into_font())
                    .color(&SEED)
                    .pos(Pos::new(HPos::Left, VPos::Top)),
                (at.0 + 4, at.1 + 1),
            )
            .map_err(err)?;
        }
        let at = chart.backend_coord(&(0.0, y));
        root.draw_text(&b.label, &label_style, (at.0 - 10, at.1))
            .map_err(err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::summary::Spread;
    use crate::bench::summary::tests::variant;
    use netbatch_engine::Dispatch;

    fn row(scenario: &str, mode: Option<Mode>, d: Option<Dispatch>, reps: &[f64]) -> Summary {
        // Per-packet costs follow from the rates; the plot reads only Mpps.
        let r: Vec<(f64, f64, f64)> = reps.iter().map(|&m| (m, 1e3 / m, 2.6e3 / m)).collect();
        Summary::new(variant(scenario, mode, d), &r)
    }

    /// A fresh temporary directory, removed with its files when dropped, whether the test
    /// passes or panics.
    fn tmp() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("netbatch-plot-")
            .tempdir()
            .unwrap()
    }

    /// A hand-made result set: udp-local-1b list runs at 19, 20, 22 Mpps (median 20)
    /// over packet at 5, 5, 6 (median 5): 4.00×; null list 60 over packet 40: 1.50×.
    /// The SVG must name every scenario and carry both ratios as text.
    #[test]
    fn svg_plot_names_scenarios_and_ratios() {
        let runs = Some(Dispatch::Runs);
        let rows = vec![
            row("null", Some(Mode::Packet), None, &[40.0, 39.0, 41.0]),
            row("null", Some(Mode::List), None, &[60.0, 61.0, 59.0]),
            row("udp-local-1b", Some(Mode::Packet), runs, &[5.0, 6.0, 5.0]),
            row("udp-local-1b", Some(Mode::List), runs, &[19.0, 22.0, 20.0]),
            row("smoltcp-udp-1b", None, None, &[15.0, 14.0, 16.0]),
        ];
        assert_eq!(
            rows[3].mpps,
            Spread {
                median: 20.0,
                min: 19.0,
                max: 22.0
            }
        );
        let dir = tmp();
        let path = dir.path().join("t.svg");
        let heading = Heading {
            title: "netbatch bench".into(),
            lines: vec!["hand-made results".into()],
        };
        plot(&path, &rows, &heading).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
        for s in [
            "null",
            "udp-local-1b list runs",
            "smoltcp-udp-1b",
            "hand-made results",
        ] {
            assert!(svg.contains(s), "{s} missing");
        }
        assert!(svg.contains("4.00×"), "udp-local-1b's ratio");
        // The seed's ratio, 6.44 / 5.07, marked on udp-local-1b's bar (and on no other).
        assert_eq!(svg.matches("seed 1.27×").count(), 1, "the seed's mark");
        assert!(svg.contains("1.50×"), "null's ratio");
        assert!(
            svg.contains("\n20.00\n"),
            "udp-local-1b list's median as a text"
        );
    }

    /// The PNG backend writes a PNG (its 8-byte signature, RFC 2083 §3.1), also when
    /// there are no list/packet pairs (no ratio panel) and a row has no repetitions.
    #[test]
    fn png_plot_is_a_png() {
        let rows = vec![
            row("smoltcp-udp-1b", None, None, &[15.0]),
            row("null", Some(Mode::List), None, &[]),
        ];
        let dir = tmp();
        let path = dir.path().join("t.PNG");
        let heading = Heading {
            title: "t".into(),
            lines: Vec::new(),
        };
        plot(&path, &rows, &heading).unwrap();
        let png = std::fs::read(&path).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    }

    #[test]
    fn heading_lines_wrap_at_spaces() {
        let five = |t: &str| t.chars().count() <= 5;
        assert_eq!(wrap("aa bb cc", five), ["aa bb", "cc"]);
        assert_eq!(wrap("aaaaaaa b", five), ["aaaaaaa", "b"]);
        assert_eq!(wrap("short", five), ["short"]);
    }

    #[test]
    fn unknown_extension_is_an_error_naming_the_file() {
        for p in ["out.jpg", "out", "out.svg.gz"] {
            let e = format_of(Path::new(p)).unwrap_err().to_string();
            assert!(e.contains(p) && e.contains(".svg"), "{e}");
        }
        assert_eq!(format_of(Path::new("a/b.SVG")).unwrap(), Format::Svg);
    }
}
