//! Reads `target/realistic.csv` (from `cargo bench --bench realistic`) and
//! draws `docs/scaling.png`: time per object of the initial sync against
//! its floor, and the heap held beyond the objects, per object, as the
//! number of objects grows.

use std::error::Error;
use std::path::Path;

use plotters::prelude::*;

/// One row of the CSV.
struct Row {
    objects: f64,
    micros: f64,
    floor_micros: f64,
    settled: f64,
    peak: f64,
}

fn rows(csv: &str) -> Result<Vec<Row>, Box<dyn Error>> {
    let mut rows = Vec::new();
    for line in csv.lines().skip(1).filter(|l| !l.trim().is_empty()) {
        let fields: Vec<f64> = line.split(',').map(str::parse).collect::<Result<_, _>>()?;
        let [objects, seconds, floor, settled, peak] = fields[..] else {
            return Err(format!("expected 5 fields: {line}").into());
        };
        rows.push(Row {
            objects,
            micros: seconds * 1e6 / objects,
            floor_micros: floor * 1e6 / objects,
            settled,
            peak,
        });
    }
    Ok(rows)
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

/// One panel: `series` (name, colour, value of a row) against the objects.
fn panel(
    area: &Area<'_>,
    title: &str,
    unit: &str,
    rows: &[Row],
    series: &[(&str, RGBColor, fn(&Row) -> f64)],
) -> Result<(), Box<dyn Error>> {
    let first = rows.first().map_or(1.0, |r| r.objects);
    let last = rows.last().map_or(10.0, |r| r.objects);
    let top = rows
        .iter()
        .flat_map(|r| series.iter().map(move |(_, _, value)| value(r)))
        .fold(0.0_f64, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((first * 0.8..last * 1.25).log_scale(), 0.0..top.max(1.0))?;
    chart
        .configure_mesh()
        .x_desc("objects")
        .y_desc(unit)
        .x_label_formatter(&|&x| {
            if x >= 1e6 {
                format!("{:.0}M", x / 1e6)
            } else {
                format!("{:.0}k", x / 1e3)
            }
        })
        .draw()?;
    for (name, colour, value) in series {
        let points: Vec<(f64, f64)> = rows.iter().map(|r| (r.objects, value(r))).collect();
        chart
            .draw_series(LineSeries::new(points.clone(), colour.stroke_width(2)))?
            .label(*name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
            });
        chart.draw_series(
            points
                .into_iter()
                .map(|p| Circle::new(p, 4, colour.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let csv = std::fs::read_to_string(root.join("target/realistic.csv")).map_err(|e| {
        format!("target/realistic.csv: {e} (run `cargo bench --bench realistic` first)")
    })?;
    let rows = rows(&csv)?;
    let out = root.join("docs/scaling.png");
    let drawing = BitMapBackend::new(&out, (1200, 480)).into_drawing_area();
    drawing.fill(&WHITE)?;
    let (left, right) = drawing.split_horizontally(600);
    panel(
        &left,
        "initial sync: time per object",
        "µs per object",
        &rows,
        &[
            ("tend", RED, |r| r.micros),
            ("floor (channel to one task)", BLUE, |r| r.floor_micros),
        ],
    )?;
    panel(
        &right,
        "heap beyond the objects",
        "bytes per object",
        &rows,
        &[
            ("settled", RED, |r| r.settled),
            ("peak while syncing", MAGENTA, |r| r.peak),
        ],
    )?;
    drawing.present()?;
    println!("wrote {}", out.display());
    Ok(())
}
