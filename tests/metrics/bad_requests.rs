//! Bad bytes at the manager's HTTP endpoints: random bytes, and valid
//! requests with random paths, headers and tails, each on a connection of
//! its own. The server answers or closes each one, never panics (a
//! panic hook counts the panics on this test's runtime threads), and
//! still serves `/healthz` and `/metrics` after all of them.

use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;

/// Cases: `TEND_FUZZ_CASES` (as the in-crate `bad_bytes` tests), else 256.
fn cases() -> u32 {
    std::env::var("TEND_FUZZ_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(256)
}

/// One request's bytes: random, or a request line for one of the
/// endpoints (or a random path) with random headers and a random tail.
fn request() -> impl Strategy<Value = Vec<u8>> {
    let paths = prop_oneof![
        1 => Just("/healthz".to_owned()),
        1 => Just("/readyz?verbose".to_owned()),
        1 => Just("/metrics".to_owned()),
        1 => Just("/debug/queues".to_owned()),
        3 => "/[A-Za-z0-9/._~%?=&+-]{0,40}",
        1 => "/[ -~]{0,40}",
    ];
    let methods =
        prop_oneof![4 => Just("GET".to_owned()), 1 => "(POST|HEAD|PUT|DELETE|OPTIONS|get|G E T)"];
    let versions =
        prop_oneof![4 => Just("HTTP/1.1".to_owned()), 1 => "(HTTP/1.0|HTTP/2|HTTP/9.9|)"];
    let header =
        prop_oneof![4 => "[A-Za-z0-9-]{1,20}: [ -~]{0,60}", 1 => "[ -~]{0,30}: [ -~]{0,60}"];
    let shaped = (
        methods,
        paths,
        versions,
        vec(header, 0..6),
        vec(any::<u8>(), 0..64),
    )
        .prop_map(|(method, path, version, headers, tail)| {
            let mut bytes = format!("{method} {path} {version}\r\n").into_bytes();
            for header in headers {
                bytes.extend_from_slice(header.as_bytes());
                bytes.extend_from_slice(b"\r\n");
            }
            bytes.extend_from_slice(b"\r\n");
            bytes.extend(tail);
            bytes
        });
    prop_oneof![1 => vec(any::<u8>(), 0..512), 3 => shaped]
}

/// Sends `bytes`, half-closes, and reads what comes back, within 5 s.
async fn send(address: std::net::SocketAddr, bytes: &[u8]) -> Result<Vec<u8>, String> {
    let exchange = async {
        let mut stream = TcpStream::connect(address).await?;
        stream.write_all(bytes).await?;
        stream.shutdown().await?;
        let mut answer = Vec::new();
        // A reset after a bad request is an answer too.
        let _ = stream.read_to_end(&mut answer).await;
        Ok::<_, std::io::Error>(answer)
    };
    match tokio::time::timeout(Duration::from_secs(5), exchange).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(error)) => Err(format!("the connection failed: {error}")),
        Err(_) => Err("no answer and no close within 5 s".to_owned()),
    }
}

/// The name of this test's runtime threads, whose panics are counted.
const THREADS: &str = "bad-requests";

static PANICS: AtomicUsize = AtomicUsize::new(0);

/// Counts the panics on [`THREADS`] (the other tests of this binary panic
/// on purpose, on threads of their own), then reports as usual.
fn count_panics() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().name() == Some(THREADS) {
            PANICS.fetch_add(1, Ordering::Relaxed);
        }
        report(info);
    }));
}

#[test]
fn bad_bytes_at_the_http_endpoints_are_answered_and_the_server_keeps_serving() {
    count_panics();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(THREADS)
        .enable_all()
        .build()
        .expect("a runtime");
    let manager = Manager::builder()
        .http_address("127.0.0.1:0".parse().expect("an address"))
        .without_signals()
        .build()
        .expect("valid");
    let address = manager.http_address().expect("bound");
    let stop = manager.shutdown_token();
    let running = runtime.spawn(manager.run());
    let config = Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    };
    TestRunner::new(config)
        .run(&request(), |bytes| {
            let answer = runtime.block_on(send(address, &bytes));
            prop_assert!(
                answer.is_ok(),
                "{:?}: {answer:?}",
                String::from_utf8_lossy(&bytes)
            );
            Ok(())
        })
        .expect("every request is answered or closed");
    assert_eq!(PANICS.load(Ordering::Relaxed), 0, "the server panicked");
    runtime.block_on(async {
        assert_eq!(get(address, "/healthz").await.status, 200);
        assert_eq!(get(address, "/metrics").await.status, 200);
        stop.cancel();
        within("the manager to stop", LIMIT, running)
            .await
            .expect("joined")
            .expect("a clean stop");
    });
}
