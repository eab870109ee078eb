//! `Proxy`: a loopback TCP proxy that can blackhole its traffic.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

/// A TCP proxy on 127.0.0.1 in front of a server, for partition tests.
///
/// While [`blackhole`](Proxy::blackhole)d, connections stay open but no
/// byte passes in either direction (as in a network partition: requests
/// hang rather than fail) and new connections are accepted but not
/// connected through. Bytes sent meanwhile are held, not dropped: after a
/// heal they pass in order, as after a real partition (unless a side gave
/// up on the connection meanwhile, e.g. its keep-alive timed out).
/// [`reset`](Proxy::reset) closes every open connection, as a peer's
/// crash or a middlebox's reset would, dropping what is held.
/// Dropping the proxy closes every connection.
///
/// # Examples
///
/// In front of a one-line echo server (in a test, in front of etcd:
/// give a replica [`endpoint`](Proxy::endpoint) instead of the server's):
///
/// ```
/// use tend::testing::Proxy;
/// use tokio::io::{AsyncReadExt, AsyncWriteExt};
/// use tokio::net::{TcpListener, TcpStream};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// let server = TcpListener::bind("127.0.0.1:0").await?;
/// let proxy = Proxy::start(server.local_addr()?).await?;
/// tokio::spawn(async move {
///     let (mut socket, _) = server.accept().await?;
///     let (mut read, mut write) = socket.split();
///     tokio::io::copy(&mut read, &mut write).await // echoes every byte
/// });
///
/// let mut client = TcpStream::connect(proxy.address()).await?;
/// proxy.blackhole(true); // a partition: the bytes wait…
/// client.write_all(b"ping").await?;
/// proxy.blackhole(false); // …and pass, in order, once it heals
/// let mut echoed = [0; 4];
/// client.read_exact(&mut echoed).await?;
/// assert_eq!(&echoed, b"ping");
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Proxy {
    address: SocketAddr,
    blackholed: Arc<watch::Sender<bool>>,
    /// Cancelled by `reset`: the connections open until then close.
    open: Arc<Mutex<CancellationToken>>,
    stop: CancellationToken,
    _task: AbortOnDropHandle<()>,
}

impl Proxy {
    /// A proxy to `target` on a free loopback port.
    ///
    /// # Errors
    ///
    /// When no loopback port can be bound.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn start(target: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let blackholed = Arc::new(watch::Sender::new(false));
        let open = Arc::new(Mutex::new(CancellationToken::new()));
        let stop = CancellationToken::new();
        let sides = Sides {
            target,
            blackholed: Arc::clone(&blackholed),
            open: Arc::clone(&open),
        };
        let task = tokio::spawn(accept(listener, sides, stop.clone()));
        Ok(Self {
            address,
            blackholed,
            open,
            stop,
            _task: AbortOnDropHandle::new(task),
        })
    }

    /// The proxy's address.
    #[must_use]
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The proxy's URL, `http://127.0.0.1:{port}`.
    #[must_use]
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Stops (`true`) or resumes (`false`) all traffic.
    pub fn blackhole(&self, on: bool) {
        self.blackholed.send_replace(on);
    }

    /// Closes every connection the proxy relays now, in both directions
    /// (one the proxy has not yet accepted is not among them), dropping the
    /// bytes a blackhole holds; later connections pass as usual (held
    /// while blackholed). A client sees its connection reset and
    /// reconnects: what a partition that outlasts a keep-alive does.
    ///
    /// ```
    /// use tend::testing::Proxy;
    /// use tokio::io::{AsyncReadExt, AsyncWriteExt};
    /// use tokio::net::{TcpListener, TcpStream};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// let server = TcpListener::bind("127.0.0.1:0").await?;
    /// let proxy = Proxy::start(server.local_addr()?).await?;
    /// tokio::spawn(async move {
    ///     while let Ok((mut socket, _)) = server.accept().await {
    ///         tokio::spawn(async move {
    ///             let (mut read, mut write) = socket.split();
    ///             tokio::io::copy(&mut read, &mut write).await
    ///         });
    ///     }
    /// });
    ///
    /// let mut cut = TcpStream::connect(proxy.address()).await?;
    /// cut.write_all(b"ping").await?; // a round trip: the proxy relays it
    /// cut.read_exact(&mut [0; 4]).await?;
    /// proxy.blackhole(true);
    /// cut.write_all(b"lost").await?; // held…
    /// proxy.reset(); // …and dropped with the connection
    /// proxy.blackhole(false);
    /// let mut rest = Vec::new();
    /// let read = cut.read_to_end(&mut rest).await;
    /// assert!(read.is_err() || rest.is_empty(), "closed, nothing echoed");
    ///
    /// let mut again = TcpStream::connect(proxy.address()).await?;
    /// again.write_all(b"ping").await?;
    /// let mut echoed = [0; 4];
    /// again.read_exact(&mut echoed).await?;
    /// assert_eq!(&echoed, b"ping");
    /// # Ok(()) }
    /// ```
    pub fn reset(&self) {
        let mut open = self.open.lock();
        open.cancel();
        *open = CancellationToken::new();
    }
}

/// What each relayed connection needs.
struct Sides {
    target: SocketAddr,
    blackholed: Arc<watch::Sender<bool>>,
    open: Arc<Mutex<CancellationToken>>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn accept(listener: TcpListener, sides: Sides, stop: CancellationToken) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
            Some(_) = connections.join_next() => continue,
        };
        let Ok((inbound, _)) = accepted else { continue };
        let blackholed = sides.blackholed.subscribe();
        let open = sides.open.lock().clone();
        let relayed = relay(inbound, sides.target, blackholed);
        connections.spawn(async move {
            // Dropping the relay closes both sockets.
            open.run_until_cancelled(relayed).await;
        });
    }
    connections.shutdown().await;
}

/// Relays one connection while the proxy is open.
async fn relay(inbound: TcpStream, target: SocketAddr, mut blackholed: watch::Receiver<bool>) {
    if blackholed.wait_for(|on| !*on).await.is_err() {
        return;
    }
    let Ok(outbound) = TcpStream::connect(target).await else {
        return;
    };
    // Without it, Nagle's algorithm and delayed acks hold each small
    // request-response exchange for ~40 ms.
    if inbound.set_nodelay(true).is_err() || outbound.set_nodelay(true).is_err() {
        return;
    }
    let cut = Arc::new(AtomicBool::new(false));
    let (in_read, in_write) = inbound.into_split();
    let (out_read, out_write) = outbound.into_split();
    let up = pipe(in_read, out_write, blackholed.clone(), Arc::clone(&cut));
    let down = pipe(out_read, in_write, blackholed, cut);
    tokio::join!(up, down);
}

/// Copies bytes one way; while the proxy is blackholed it stops reading,
/// so that the bytes wait (in the socket buffers, or the one chunk read
/// just before) and pass in order once it heals, as after a real
/// partition: dropping them would corrupt the HTTP/2 stream.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut blackholed: watch::Receiver<bool>,
    cut: Arc<AtomicBool>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        if blackholed.wait_for(|on| !*on).await.is_err() {
            break;
        }
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        // Hold a chunk read as the blackhole began until it heals.
        if blackholed.wait_for(|on| !*on).await.is_err() || cut.load(Ordering::Relaxed) {
            break;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            break;
        }
    }
    cut.store(true, Ordering::Relaxed);
    let _ = to.shutdown().await;
}
