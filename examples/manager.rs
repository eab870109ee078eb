//! A small controller under a [`Manager`], with metrics and health endpoints
//! on 127.0.0.1.
//!
//! Lights have a desired state (`want_on`) and an actual one (`is_on`); the
//! controller switches each light to what is wanted, and a "tenant" task
//! keeps flipping wishes. Run it and scrape while it runs:
//!
//! ```text
//! cargo run --example manager                    # stops after 3 seconds
//! cargo run --example manager -- --seconds 600   # runs longer
//! cargo run --example manager -- --addr 127.0.0.1:9090
//! curl http://127.0.0.1:PORT/metrics
//! ```

use std::time::Duration;

use tend::client::{Client, ClientError};
use tend::controller::{Action, Context, Reconciler};
use tend::manager::Manager;
use tend::memory::MemoryElectionGroup;
use tend::memory::MemoryStore;
use tend::{BoxError, CancellationToken, Informer, Revision};

#[derive(Debug, Clone, PartialEq)]
struct Light {
    room: String,
    want_on: bool,
    is_on: bool,
    version: Revision,
}

tend::impl_object!(Light, key: room: String, version: version);

/// Observe the light, compare wish and state, act by switching it.
struct Switch;

impl Reconciler<Light> for Switch {
    type Error = ClientError;

    async fn reconcile(&self, ctx: Context<Light>) -> Result<Action, Self::Error> {
        let Some(light) = ctx.object() else {
            return Ok(Action::Done);
        };
        if light.want_on != light.is_on {
            let mut switched = Light::clone(light);
            switched.is_on = light.want_on;
            // The reconcile's client is fenced by the election: every write
            // carries the leader's token, checked with the write.
            let lights = ctx.client::<Light>().expect("writes lights");
            lights.update(switched).await?;
            println!(
                "{}: switched {} (fencing token {:?})",
                light.room,
                if light.want_on { "on" } else { "off" },
                ctx.fencing_token()
            );
        }
        Ok(Action::Done)
    }
}

fn arg(name: &str) -> Option<String> {
    let mut args = std::env::args().skip_while(|a| a != name);
    args.next()?;
    args.next()
}

const ROOMS: [&str; 3] = ["hall", "kitchen", "study"];

/// Every light off, and wanted off.
async fn seed(lights: &Client<Light>) -> Result<(), ClientError> {
    for room in ROOMS {
        let light = Light {
            room: room.into(),
            want_on: false,
            is_on: false,
            version: Revision::ZERO,
        };
        lights.create(light).await?;
    }
    Ok(())
}

/// A tenant who changes their mind every 300 ms.
async fn run_tenant(lights: Client<Light>, cancel: CancellationToken) -> Result<(), BoxError> {
    for turn in 0.. {
        tokio::select! {
            () = cancel.cancelled() => break,
            () = tokio::time::sleep(Duration::from_millis(300)) => {}
        }
        let room = ROOMS[turn % ROOMS.len()].to_owned();
        // Re-read and retried if the controller wrote in between.
        lights
            .modify(&room, |light| light.want_on = !light.want_on)
            .await?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let seconds: u64 = arg("--seconds").map_or(Ok(3), |s| s.parse())?;
    let address = arg("--addr")
        .unwrap_or_else(|| "127.0.0.1:0".to_owned())
        .parse()?;

    let lights = MemoryStore::new("lights");
    let election = MemoryElectionGroup::new("lights-controller");
    seed(&lights.client()).await?;

    let candidate = election.candidate();
    let fenced = lights.client_fenced_by(&candidate);
    let mut manager = Manager::builder()
        .http_address(address)
        .leader_election(candidate)
        .graceful_shutdown_timeout(Duration::from_secs(5))
        .build()?;
    let informer = manager.informer("lights", || Informer::builder(lights.clone()).build())?;
    let controller = manager
        .controller("lights", &informer, Switch)
        .client(fenced)
        .build()?;
    manager.add_controller(controller)?;

    let tenant = lights.client();
    manager.add_task("tenant", move |cancel| run_tenant(tenant, cancel))?;

    // Stop by itself after a while (Ctrl-C works too).
    let shutdown = manager.shutdown_token();
    manager.add_task("timer", move |cancel| async move {
        tokio::select! {
            () = cancel.cancelled() => {}
            () = tokio::time::sleep(Duration::from_secs(seconds)) => shutdown.cancel(),
        }
        Ok::<(), BoxError>(())
    })?;

    if let Some(address) = manager.http_address() {
        println!("scrape http://{address}/metrics  (also /healthz, /readyz, /debug/queues)");
    }
    println!("running for {seconds} s (--seconds N to change; Ctrl-C to stop)");
    manager.run().await?;
    println!("stopped cleanly");
    Ok(())
}
