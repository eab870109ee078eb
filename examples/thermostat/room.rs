//! The thermostat example's world: the room (its temperature, the heat
//! it loses, its door), a monitor of the true temperature, and the
//! summary.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tend::memory::MemoryStore;
use tend::{BoxError, CancellationToken};
use tokio::time::MissedTickBehavior;

use crate::support::{Clock, Summary, verdict};
use crate::{HYSTERESIS, Heater, ROOM, Thermostat};

/// The physical world: the room's temperature and its door.
#[derive(Debug)]
pub(crate) struct Room {
    pub(crate) celsius: f64,
    door_open: bool,
}

impl Room {
    /// A room at `celsius`, its door shut.
    pub(crate) fn at(celsius: f64) -> Self {
        Self {
            celsius,
            door_open: false,
        }
    }
}

/// What the controller and the world did, for the summary.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) reconciles: u32,
    pub(crate) switches: u32,
    door_openings: u32,
    /// Per desired temperature: how long the room took to settle near it
    /// (within the hysteresis).
    reached: Vec<(f64, Duration)>,
    outside: Duration,
    coldest: f64,
    warmest: f64,
}

const OUTSIDE_CELSIUS: f64 = 5.0;
/// Heat lost per second per degree above the outside, door shut and open.
const LOSS_SHUT: f64 = 0.04;
const LOSS_OPEN: f64 = 0.1;
/// Degrees per second the heater adds.
const HEATER_POWER: f64 = 2.0;
const TICK: Duration = Duration::from_millis(50);

/// Steps the room's temperature every tick of simulated time. A late tick
/// is not caught up (the simulation slows down with a busy machine rather
/// than jumping).
pub(crate) async fn run_physics(
    room: Arc<Mutex<Room>>,
    heaters: MemoryStore<Heater>,
    stop: CancellationToken,
) -> Result<(), BoxError> {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return Ok(()),
        }
        let heating = heaters.get(&ROOM.to_owned()).is_some_and(|h| h.on);
        let mut room = room.lock().expect("not poisoned");
        let loss = if room.door_open { LOSS_OPEN } else { LOSS_SHUT };
        let power = if heating { HEATER_POWER } else { 0.0 };
        room.celsius += (power - loss * (room.celsius - OUTSIDE_CELSIUS)) * TICK.as_secs_f64();
    }
}

/// Opens the door now and then, for a while.
pub(crate) async fn run_door(
    room: Arc<Mutex<Room>>,
    stats: Arc<Mutex<Stats>>,
    clock: Clock,
    stop: CancellationToken,
) -> Result<(), BoxError> {
    loop {
        let (shut_for, open_for) = (
            Duration::from_millis(fastrand::u64(1_200..2_500)),
            Duration::from_millis(fastrand::u64(600..1_500)),
        );
        for (wait, open) in [(shut_for, true), (open_for, false)] {
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = stop.cancelled() => return Ok(()),
            }
            let celsius = {
                let mut room = room.lock().expect("not poisoned");
                room.door_open = open;
                room.celsius
            };
            if open {
                stats.lock().expect("not poisoned").door_openings += 1;
            }
            let what = if open { "opens" } else { "shuts" };
            println!("{} WORLD door {what} ({celsius:.2} °C)", clock.stamp());
        }
    }
}

/// Watches the true temperature (not the sensor's): how long the room
/// takes to settle near the target, and how long it is outside the band
/// afterwards.
pub(crate) async fn run_monitor(
    room: Arc<Mutex<Room>>,
    thermostats: MemoryStore<Thermostat>,
    stats: Arc<Mutex<Stats>>,
    stop: CancellationToken,
) -> Result<(), BoxError> {
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let (mut target, mut since) = (f64::NAN, tokio::time::Instant::now());
    let mut reached = false;
    loop {
        tokio::select! {
            at = tick.tick() => {
                let Some(thermostat) = thermostats.get(&ROOM.to_owned()) else { continue };
                if thermostat.target != target {
                    (target, since, reached) = (thermostat.target, at, false);
                }
                let celsius = room.lock().expect("not poisoned").celsius;
                let inside = (celsius - target).abs() <= thermostat.band;
                let settled = (celsius - target).abs() <= HYSTERESIS;
                let mut stats = stats.lock().expect("not poisoned");
                if !reached && settled {
                    reached = true;
                    stats.reached.push((target, at - since));
                } else if reached {
                    if !inside {
                        stats.outside += tick.period();
                    }
                    stats.coldest = stats.coldest.min(celsius - target);
                    stats.warmest = stats.warmest.max(celsius - target);
                }
            }
            () = stop.cancelled() => return Ok(()),
        }
    }
}

/// The summary, from the true temperature (not the sensor's).
pub(crate) fn summary(
    thermostats: &MemoryStore<Thermostat>,
    room: &Mutex<Room>,
    stats: &Mutex<Stats>,
) -> Summary {
    let stats = stats.lock().expect("not poisoned");
    let thermostat = thermostats.get(&ROOM.to_owned()).expect("declared");
    let celsius = room.lock().expect("not poisoned").celsius;
    let reached: Vec<String> = stats
        .reached
        .iter()
        .map(|(target, took)| format!("{:.2}s ({target:.1} °C)", took.as_secs_f64()))
        .collect();
    let inside = (celsius - thermostat.target).abs() <= thermostat.band;
    let held = if inside && stats.outside.is_zero() {
        "in band throughout".to_owned()
    } else {
        verdict(inside, "in band")
    };
    Summary::default()
        .line(format!(
            "world: the door opened {} times",
            stats.door_openings
        ))
        .line(format!(
            "controller: {} reconciles, {} heater switches",
            stats.reconciles, stats.switches
        ))
        .line(format!(
            "time to settle (within ±{HYSTERESIS} °C): {}",
            reached.join(", ")
        ))
        .line(format!(
            "once settled: {:.2}s outside the band, from {:+.2} to {:+.2} °C off the target",
            stats.outside.as_secs_f64(),
            stats.coldest,
            stats.warmest,
        ))
        .line(format!(
            "final: {ROOM} wants {:.1} ±{:.1} °C, at {celsius:.1} °C: {held}",
            thermostat.target, thermostat.band,
        ))
}
