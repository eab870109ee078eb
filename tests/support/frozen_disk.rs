//! A disk that a test can pause: a small ext4 file system on a loop
//! device, frozen with `fsfreeze` (every write to it, and every fsync,
//! blocks until it is thawed), as a stalled disk would. Needs root.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};

use super::command::run;

/// A mounted loop file system; unmounted (thawed first) and its image
/// removed when dropped.
#[derive(Debug)]
pub struct Disk {
    image: PathBuf,
    mount: PathBuf,
}

fn text(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

impl Disk {
    /// A `size_mib` file system (a sparse image) mounted at `dir/name`.
    pub fn create(dir: &Path, name: &str, size_mib: u64) -> Result<Self, String> {
        let image = dir.join(format!("{name}.img"));
        let mount = dir.join(name);
        let file = std::fs::File::create(&image).map_err(|e| e.to_string())?;
        file.set_len(size_mib << 20).map_err(|e| e.to_string())?;
        std::fs::create_dir_all(&mount).map_err(|e| e.to_string())?;
        run("mkfs.ext4", &["-q", "-F", text(&image)])?;
        run("mount", &["-o", "loop", text(&image), text(&mount)])?;
        Ok(Self { image, mount })
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.mount
    }
}

/// Freezes the file system mounted at `mount`: writes to it block.
pub fn freeze(mount: &Path) {
    run("fsfreeze", &["--freeze", text(mount)]).expect("the freeze");
}

/// Thaws it: the blocked writes go on.
pub fn thaw(mount: &Path) {
    run("fsfreeze", &["--unfreeze", text(mount)]).expect("the thaw");
}

impl Drop for Disk {
    fn drop(&mut self) {
        // Thawed first, so that processes blocked on it can die.
        let _ = run("fsfreeze", &["--unfreeze", text(&self.mount)]);
        let _ = run("umount", &["-l", text(&self.mount)]);
        let _ = std::fs::remove_file(&self.image);
    }
}
