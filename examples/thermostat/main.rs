//! The seed text's thermostat: a room loses heat through its walls (and
//! much faster while its door is open, which happens now and then), a
//! sensor can only be *read*, and a controller switches a heater to keep
//! the temperature within a band around the desired one. Halfway through,
//! the desired temperature is raised and the loop follows. The room, its
//! door, the monitor and the summary are in `room.rs`.
//!
//! tend features: the `poll` backend (`PollSource`: a system with no watch,
//! listed on an interval and diffed into changes), `watches` (a reading
//! wakes its thermostat) and `owns` (the heater, so that a heater switched
//! by hand is switched back), `Client::create_or_update` through the
//! reconcile's client, and a `Manager` running three informers, the
//! controller and the simulation's tasks.
//!
//! ```sh
//! cargo run --example thermostat                  # ~8 s
//! cargo run --example thermostat -- --duration 60
//! cargo run --example thermostat -- --forever
//! ```

mod room;
#[path = "../support/mod.rs"]
mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tend::client::{ClientError, Effect};
use tend::controller::{Action, Context, Reconciler, Trigger};
use tend::manager::Manager;
use tend::memory::MemoryStore;
use tend::poll::PollSource;
use tend::{BoxError, Informer, Revision};

use room::{Room, Stats, run_door, run_monitor, run_physics};
use support::Clock;

/// The desired state: a temperature, and how far from it is acceptable.
#[derive(Debug, Clone, PartialEq)]
struct Thermostat {
    room: String,
    target: f64,
    band: f64,
    version: Revision,
}

/// The observed state, from the sensor: only ever read.
#[derive(Debug, Clone, PartialEq)]
struct Reading {
    room: String,
    celsius: f64,
    version: Revision,
}

/// What the controller acts on.
#[derive(Debug, Clone, PartialEq)]
struct Heater {
    room: String,
    on: bool,
    version: Revision,
}

tend::impl_object!(Thermostat, key: room: String, version: version);
tend::impl_object!(Reading, key: room: String, version: version);
tend::impl_object!(Heater, key: room: String, version: version);

const ROOM: &str = "hall";
/// The heater switches on below `target - HYSTERESIS` and off above
/// `target + HYSTERESIS`: well inside the band, so that the sensor's
/// delay does not carry the room out of it.
const HYSTERESIS: f64 = 0.3;
const SENSOR_INTERVAL: Duration = Duration::from_millis(200);

/// Observe the reading and the heater, compare with the band, act on the
/// heater.
struct Control {
    clock: Clock,
    stats: Arc<Mutex<Stats>>,
}

impl Reconciler<Thermostat> for Control {
    type Error = ClientError;

    async fn reconcile(&self, ctx: Context<Thermostat>) -> Result<Action, ClientError> {
        let Some(thermostat) = ctx.object() else {
            return Ok(Action::Done);
        };
        let reading = ctx.cache::<Reading>().and_then(|s| s.get(ctx.key()));
        let heater = ctx.cache::<Heater>().and_then(|s| s.get(ctx.key()));
        let heating = heater.is_some_and(|h| h.on);
        let Some(reading) = reading else {
            return Ok(Action::Done); // no reading yet: the sensor's first one wakes us
        };
        let (low, high) = (
            thermostat.target - HYSTERESIS,
            thermostat.target + HYSTERESIS,
        );
        let want = if reading.celsius < low {
            true
        } else if reading.celsius > high {
            false
        } else {
            heating
        };
        self.stats.lock().expect("not poisoned").reconciles += 1;
        let quiet = ctx
            .triggers()
            .iter()
            .all(|t| matches!(t, Trigger::Mapped | Trigger::Owned));
        if want == heating && quiet {
            return Ok(Action::Done); // a new reading or our own switch: not logged
        }
        let act = if want == heating {
            "nothing to do".to_owned()
        } else {
            let heater = Heater {
                room: ctx.key().clone(),
                on: want,
                version: Revision::ZERO,
            };
            // Read live and compared: a second reconcile racing the cache
            // finds the heater already switched and writes nothing.
            let heaters = ctx.client::<Heater>().expect("writes heaters");
            let written = heaters.create_or_update(heater, |h| h.on = want).await?;
            if written.effect == Effect::Unchanged {
                "nothing to do (already switched)".to_owned()
            } else {
                self.stats.lock().expect("not poisoned").switches += 1;
                format!("heater {}", if want { "on" } else { "off" })
            }
        };
        println!(
            "{} reconcile {} ({}) | observe: {:.1} °C, heater {} | compare: want {:.1} ±{:.1} (on below {low:.1}, off above {high:.1}) | act: {act}",
            self.clock.stamp(),
            ctx.key(),
            ctx.triggers(),
            reading.celsius,
            if heating { "on" } else { "off" },
            thermostat.target,
            thermostat.band,
        );
        Ok(Action::Done)
    }
}

/// The sensor, the three informers, the controller and the simulation's
/// tasks, under one manager.
fn wire(
    room: &Arc<Mutex<Room>>,
    thermostats: &MemoryStore<Thermostat>,
    heaters: &MemoryStore<Heater>,
    stats: &Arc<Mutex<Stats>>,
    clock: Clock,
) -> Result<Manager, BoxError> {
    let sensor = PollSource::new("sensor", SENSOR_INTERVAL, {
        let room = Arc::clone(room);
        move || {
            let celsius = room.lock().expect("not poisoned").celsius;
            // The sensor reads to a tenth of a degree.
            let reading = Reading {
                room: ROOM.to_owned(),
                celsius: (celsius * 10.0).round() / 10.0,
                version: Revision::ZERO,
            };
            async move { Ok::<_, std::convert::Infallible>(vec![reading]) }
        }
    })?;

    let mut manager = Manager::builder().build()?;
    let desired = manager.informer("thermostats", || {
        Informer::builder(thermostats.clone()).build()
    })?;
    let readings = manager.informer("sensor", || Informer::builder(sensor).build())?;
    let heater_cache =
        manager.informer("heaters", || Informer::builder(heaters.clone()).build())?;
    let control = Control {
        clock,
        stats: Arc::clone(stats),
    };
    let controller = manager
        .controller("thermostat", &desired, control)
        .watches(&readings, |r: &Reading| vec![r.room.clone()])
        .owns(&heater_cache, |h: &Heater| Some(h.room.clone()))
        .client(heaters.client())
        .build()?;
    manager.add_controller(controller)?;
    // Tasks get a token cancelled once the controller and informers stopped.
    let (r, h) = (Arc::clone(room), heaters.clone());
    manager.add_task("physics", move |stop| run_physics(r, h, stop))?;
    let (r, st) = (Arc::clone(room), Arc::clone(stats));
    manager.add_task("door", move |stop| run_door(r, st, clock, stop))?;
    let (r, t, st) = (Arc::clone(room), thermostats.clone(), Arc::clone(stats));
    manager.add_task("monitor", move |stop| run_monitor(r, t, st, stop))?;
    Ok(manager)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let duration = support::run_for("thermostat", 8.0);
    let clock = Clock::start();
    let room = Arc::new(Mutex::new(Room::at(17.0)));
    let stats = Arc::new(Mutex::new(Stats::default()));
    let thermostats = MemoryStore::<Thermostat>::new("thermostats");
    let heaters = MemoryStore::<Heater>::new("heaters");
    let manager = wire(&room, &thermostats, &heaters, &stats, clock)?;
    let stop = manager.shutdown_token();

    println!(
        "declare: thermostat {ROOM} wants 20.0 ±1.0 °C; the room is at 17.0 °C, 5.0 °C outside"
    );
    let thermostat = Thermostat {
        room: ROOM.to_owned(),
        target: 20.0,
        band: 1.0,
        version: Revision::ZERO,
    };
    thermostats.client().create(thermostat).await?;
    let running = tokio::spawn(manager.run());
    support::play(&stop, async {
        clock.at(duration, 0.5).await;
        thermostats
            .client()
            .modify(&ROOM.to_owned(), |t| t.target = 21.5)
            .await?;
        println!(
            "{} declare: thermostat {ROOM} now wants 21.5 ±1.0 °C",
            clock.stamp()
        );
        clock.at(duration, 1.0).await;
        Ok::<_, BoxError>(())
    })
    .await?;
    running.await??;
    println!("{}", room::summary(&thermostats, &room, &stats));
    Ok(())
}
