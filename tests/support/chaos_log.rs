//! The replicas' reconcile logs of a chaos run: one file per process life,
//! a line when a reconcile starts (`S key token ns`), one when its write
//! leaves, fenced (`W key token ns`, where the replica logs it), and one
//! when it ends or is cancelled (`E key token ns outcome`). A start without
//! an end was cut by the process's death.

#![allow(unreachable_pub)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// When a process life ended (wall-clock ns), by its log file.
#[derive(Debug, Clone)]
pub struct Death {
    pub log: PathBuf,
    pub at: u64,
    /// The process was stopped (SIGSTOP) through a handover of its shards.
    pub paused: bool,
}

/// One reconcile, as logged.
#[derive(Debug, Clone)]
pub struct Reconcile {
    /// The process life (its log file's name).
    pub life: String,
    pub key: String,
    pub token: u64,
    pub start: u64,
    pub end: u64,
    pub outcome: String,
    /// When its write left, if the replica logs it.
    pub wrote: Option<u64>,
}

/// Every reconcile in the logs under `dir`; a reconcile still running at
/// its process's death ends then.
pub fn parse_logs(dir: &Path, deaths: &[Death]) -> Vec<Reconcile> {
    let mut reconciles = Vec::new();
    for entry in std::fs::read_dir(dir).expect("the logs' directory") {
        let path = entry.expect("a log").path();
        let death = deaths
            .iter()
            .find(|d| d.log == path)
            .unwrap_or_else(|| panic!("{} has no recorded death", path.display()));
        let text = std::fs::read_to_string(&path).expect("a readable log");
        let life = path.file_name().unwrap().to_string_lossy().into_owned();
        reconciles.extend(parse(&life, &text, death.at));
    }
    reconciles
}

fn parse(life: &str, text: &str, died: u64) -> Vec<Reconcile> {
    let mut running: HashMap<String, Reconcile> = HashMap::new();
    let mut done = Vec::new();
    // The last line may be cut by a SIGKILL mid-write.
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        match fields.as_slice() {
            ["S", key, token, at] => {
                let (Ok(token), Ok(start)) = (token.parse(), at.parse()) else {
                    continue;
                };
                let reconcile = Reconcile {
                    life: life.to_owned(),
                    key: (*key).to_owned(),
                    token,
                    start,
                    end: died,
                    outcome: "killed".to_owned(),
                    wrote: None,
                };
                let previous = running.insert((*key).to_owned(), reconcile);
                assert!(previous.is_none(), "{life}: {key} started twice at once");
            }
            ["W", key, _, at] => {
                if let (Some(reconcile), Ok(at)) = (running.get_mut(*key), at.parse()) {
                    reconcile.wrote = Some(at);
                }
            }
            ["E", key, _, at, outcome] => {
                let Ok(end) = at.parse() else { continue };
                let mut reconcile = running
                    .remove(*key)
                    .unwrap_or_else(|| panic!("{life}: {key} ended unstarted"));
                reconcile.end = end;
                reconcile.outcome = (*outcome).to_owned();
                done.push(reconcile);
            }
            _ => {}
        }
    }
    done.extend(running.into_values());
    done
}

/// Pairs of reconciles of one key, in different process lives, that
/// overlapped in time; and apart, those where the earlier one was in a
/// life stopped through the handover and wrote nothing (it resumed with a
/// stale token: its write had to be refused, or it was cancelled), or, in
/// a life that logs its writes (`W`), that wrote nothing or whose write
/// had left before the other began. A paused reconcile that wrote
/// otherwise counts as an overlap.
pub fn overlaps(reconciles: &[Reconcile], deaths: &[Death]) -> (usize, usize) {
    let paused: Vec<String> = deaths
        .iter()
        .filter(|d| d.paused)
        .map(|d| d.log.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let excused = |r: &Reconcile| paused.contains(&r.life) && r.outcome != "ok";
    // Where a life logs its writes (`W`): a paused reconcile that wrote
    // nothing, or whose fenced write left before the other began, acted
    // only then; the rest of its span is the process frozen.
    let logs_writes: std::collections::HashSet<&str> = reconciles
        .iter()
        .filter(|r| r.wrote.is_some())
        .map(|r| r.life.as_str())
        .collect();
    let acted_before = |a: &Reconcile, b: &Reconcile| {
        paused.contains(&a.life)
            && logs_writes.contains(a.life.as_str())
            && a.wrote.is_none_or(|wrote| wrote < b.start)
    };
    let mut by_key: HashMap<&str, Vec<&Reconcile>> = HashMap::new();
    for reconcile in reconciles {
        by_key.entry(&reconcile.key).or_default().push(reconcile);
    }
    let (mut overlapping, mut spanning) = (0, 0);
    for runs in by_key.values_mut() {
        runs.sort_by_key(|r| r.start);
        for (i, a) in runs.iter().enumerate() {
            for b in runs[i + 1..].iter().take_while(|b| b.start < a.end) {
                if b.life == a.life {
                    continue;
                }
                if excused(a) || excused(b) || acted_before(a, b) {
                    spanning += 1;
                } else {
                    eprintln!(
                        "overlap on {}: {} [{}, {}] token {} {} (wrote {:?}) and {} [{}, {}] token {} {}",
                        a.key,
                        a.life,
                        a.start,
                        a.end,
                        a.token,
                        a.outcome,
                        a.wrote,
                        b.life,
                        b.start,
                        b.end,
                        b.token,
                        b.outcome
                    );
                    overlapping += 1;
                }
            }
        }
    }
    (overlapping, spanning)
}
