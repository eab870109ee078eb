//! Reads `target/soak.csv` (from `cargo bench --bench soak`) and draws
//! `docs/soak.png`: what the process holds over the soak's minutes.

use std::collections::HashMap;
use std::error::Error;
use std::path::Path;

use plotters::prelude::*;

/// The CSV's columns by name, each a series over the rows.
struct Columns(HashMap<String, Vec<f64>>);

impl Columns {
    fn parse(csv: &str) -> Result<Self, Box<dyn Error>> {
        let mut lines = csv.lines().filter(|l| !l.trim().is_empty());
        let header: Vec<String> = lines
            .next()
            .ok_or("an empty CSV")?
            .split(',')
            .map(str::to_owned)
            .collect();
        let mut columns: HashMap<String, Vec<f64>> =
            header.iter().map(|h| (h.clone(), Vec::new())).collect();
        for line in lines {
            let fields: Vec<f64> = line.split(',').map(str::parse).collect::<Result<_, _>>()?;
            if fields.len() != header.len() {
                return Err(format!("expected {} fields: {line}", header.len()).into());
            }
            for (name, value) in header.iter().zip(fields) {
                columns.entry(name.clone()).or_default().push(value);
            }
        }
        Ok(Self(columns))
    }

    fn get(&self, name: &str) -> Result<&[f64], Box<dyn Error>> {
        self.0
            .get(name)
            .map(Vec::as_slice)
            .ok_or_else(|| format!("no column {name}").into())
    }
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

/// One series of a panel: its label, colour, column and scale.
struct Series {
    label: &'static str,
    colour: RGBColor,
    column: &'static str,
    scale: f64,
}

const fn series(label: &'static str, colour: RGBColor, column: &'static str, scale: f64) -> Series {
    Series {
        label,
        colour,
        column,
        scale,
    }
}

/// One panel: each series against the minutes.
fn panel(
    area: &Area<'_>,
    title: &str,
    unit: &str,
    columns: &Columns,
    all: &[Series],
) -> Result<(), Box<dyn Error>> {
    let minutes: Vec<f64> = columns.get("seconds")?.iter().map(|s| s / 60.0).collect();
    let end = minutes.last().copied().unwrap_or(1.0).max(1.0 / 6.0);
    let mut lines = Vec::new();
    for s in all {
        let values = columns.get(s.column)?.iter().map(|v| v * s.scale);
        lines.push((s, minutes.iter().copied().zip(values).collect::<Vec<_>>()));
    }
    let top = lines
        .iter()
        .flat_map(|(_, points)| points.iter().map(|p| p.1))
        .fold(0.0_f64, f64::max);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..end, 0.0..(top * 1.2).max(1.0))?;
    chart
        .configure_mesh()
        .x_desc("minutes")
        .y_desc(unit)
        .draw()?;
    for (s, points) in lines {
        let colour = s.colour;
        chart
            .draw_series(LineSeries::new(points, colour.stroke_width(2)))?
            .label(s.label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()?;
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let csv = std::fs::read_to_string(root.join("target/soak.csv"))
        .map_err(|e| format!("target/soak.csv: {e} (run `cargo bench --bench soak` first)"))?;
    let columns = Columns::parse(&csv)?;
    let out = root.join("docs/soak.png");
    let drawing = BitMapBackend::new(&out, (1200, 900)).into_drawing_area();
    drawing.fill(&WHITE)?;
    let panels = drawing.split_evenly((2, 2));
    let mib = 1.0 / (1024.0 * 1024.0);
    panel(
        &panels[0],
        "memory",
        "MiB",
        &columns,
        &[
            series("RSS", BLUE, "rss_bytes", mib),
            series("live heap", RED, "heap_bytes", mib),
        ],
    )?;
    panel(
        &panels[1],
        "keys",
        "thousands",
        &columns,
        &[
            series("keys in the store", BLACK, "keys", 1e-3),
            series("hot-key counts", MAGENTA, "hot_keys", 1e-3),
        ],
    )?;
    panel(
        &panels[2],
        "per-key tables",
        "keys",
        &columns,
        &[
            series("queued", BLUE, "queued", 1.0),
            series("rate limited", RED, "rate_limited", 1.0),
            series("last states", GREEN, "last_states", 1.0),
            series("awaiting writes", MAGENTA, "awaiting_writes", 1.0),
            series("departed", CYAN, "departed", 1.0),
        ],
    )?;
    panel(
        &panels[3],
        "runtime",
        "count",
        &columns,
        &[series("tasks alive", BLACK, "tasks", 1.0)],
    )?;
    drawing.present()?;
    println!("wrote {}", out.display());
    Ok(())
}
