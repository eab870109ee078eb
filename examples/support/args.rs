//! The gallery's command line: `--duration SECONDS` or `--forever`.

use std::time::Duration;

/// How long an example runs, from its command line: `default_secs`,
/// `--duration SECONDS`, or `--forever` (`None`).
pub(crate) fn run_for(example: &str, default_secs: f64) -> Option<Duration> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--forever") {
        return None;
    }
    let secs = match args.iter().position(|a| a == "--duration") {
        Some(i) => args.get(i + 1).and_then(|s| s.parse::<f64>().ok()),
        None => Some(default_secs),
    };
    match secs.filter(|s| s.is_finite() && *s > 0.0) {
        Some(secs) => Some(Duration::from_secs_f64(secs)),
        None => {
            eprintln!("usage: {example} [--duration SECONDS | --forever]");
            std::process::exit(2);
        }
    }
}
