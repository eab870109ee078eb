//! Hosts in network namespaces on one bridge, for tests of what crosses a
//! network. Each host is a namespace of its own with one address on a
//! bridge that lives in a hub namespace; a host is cut off by taking its
//! bridge port down. Its own link stays up, so what it sends is dropped and
//! its connections stall, as in a real partition, rather than being reset.
//!
//! Namespaces are named after the creating process's id, and deleted, with
//! every process in them killed, when the [`Network`] that created them is
//! dropped (a process in another namespace may attach to the same network
//! to cut and heal hosts; it deletes nothing).

#![allow(dead_code, unreachable_pub)]

use std::net::Ipv4Addr;
use std::process::Command;

use super::command::run;

/// One host: a namespace and its address on the bridge.
#[derive(Debug, Clone)]
pub struct Host {
    pub name: String,
    pub namespace: String,
    pub address: Ipv4Addr,
    /// Its port on the bridge, in the hub namespace.
    port: String,
}

impl Host {
    /// A command that runs `program` inside this host's namespace (`ip
    /// netns exec` execs it: the child's id is the program's).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.namespace])
            .arg(program);
        command
    }
}

/// Hosts on a bridge; see the module docs.
#[derive(Debug)]
pub struct Network {
    prefix: String,
    hosts: Vec<Host>,
    /// Whether this value created the namespaces (and deletes them).
    owned: bool,
}

/// Runs `ip` with `args`.
fn ip(args: &[&str]) -> Result<(), String> {
    run("ip", args)
}

impl Network {
    /// Creates one namespace per name (addresses 10.210.0.1, .2, … in
    /// order) and the hub. Fails (the caller may skip) where namespaces
    /// cannot be made, e.g. without root.
    pub fn create(tag: &str, names: &[&str]) -> Result<Self, String> {
        let mut network = Self::attach(&format!("tend{}{tag}", std::process::id()), names);
        ip(&["netns", "add", &network.hub()])?;
        // From here on, a failure deletes what exists.
        network.owned = true;
        let hub = network.hub();
        ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &hub, "link", "set", "br0", "up"])?;
        for host in &network.hosts {
            network.plug(host)?;
        }
        Ok(network)
    }

    /// The network `create` made in another process, under `prefix` (its
    /// [`Network::prefix`]), with the same names: for cutting and healing.
    pub fn attach(prefix: &str, names: &[&str]) -> Self {
        let hosts = names
            .iter()
            .zip(1u8..)
            .map(|(name, n)| Host {
                name: (*name).to_owned(),
                namespace: format!("{prefix}-{name}"),
                address: Ipv4Addr::new(10, 210, 0, n),
                port: format!("p{n}"),
            })
            .collect();
        Self {
            prefix: prefix.to_owned(),
            hosts,
            owned: false,
        }
    }

    fn hub(&self) -> String {
        format!("{}-hub", self.prefix)
    }

    /// What [`Network::attach`] takes.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    pub fn host(&self, name: &str) -> &Host {
        self.hosts
            .iter()
            .find(|host| host.name == name)
            .unwrap_or_else(|| panic!("no host {name}"))
    }

    fn plug(&self, host: &Host) -> Result<(), String> {
        let (hub, ns) = (self.hub(), host.namespace.as_str());
        ip(&["netns", "add", ns])?;
        ip(&[
            "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", &host.port,
            "netns", &hub,
        ])?;
        let address = format!("{}/24", host.address);
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
        ip(&["-n", ns, "addr", "add", &address, "dev", "eth0"])?;
        ip(&["-n", ns, "link", "set", "eth0", "up"])?;
        ip(&["-n", &hub, "link", "set", &host.port, "master", "br0"])?;
        ip(&["-n", &hub, "link", "set", &host.port, "up"])
    }

    /// Cuts `host` off from every other host.
    pub fn cut(&self, host: &Host) {
        ip(&["-n", &self.hub(), "link", "set", &host.port, "down"]).expect("the cut");
    }

    /// Joins `host` to the others again.
    pub fn heal(&self, host: &Host) {
        ip(&["-n", &self.hub(), "link", "set", &host.port, "up"]).expect("the heal");
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let mut namespaces: Vec<String> = self.hosts.iter().map(|h| h.namespace.clone()).collect();
        namespaces.push(self.hub());
        for ns in &namespaces {
            let pids = Command::new("ip").args(["netns", "pids", ns]).output();
            let pids = pids.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
            for pid in pids.unwrap_or_default().split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).status();
            }
            // Deleting a namespace drops its links (the veth pairs) too.
            let _ = ip(&["netns", "del", ns]);
        }
    }
}
