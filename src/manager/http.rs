//! The manager's HTTP server: the status page (`/`, `/status` and its
//! files), `/metrics`, `/healthz`, `/readyz`, `/debug/queues`,
//! `/debug/runnables` and `/debug/shards` (feature `http`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::HeaderValue;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::registry::Registry;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::ManagerError;
use super::group::Exit;
use super::page;
use super::status::{Probe, Status};

/// What every request handler reads.
struct Shared {
    registry: Registry,
    status: Arc<Status>,
}

/// Serves until `cancel` is cancelled, then lets open connections finish
/// their current request.
///
/// # Cancel safety
///
/// Dropping the future aborts the connections' tasks.
pub(super) async fn serve(
    listener: std::net::TcpListener,
    registry: Registry,
    status: Arc<Status>,
    cancel: CancellationToken,
) -> Exit {
    let listener = tokio::net::TcpListener::from_std(listener).map_err(ManagerError::Http)?;
    let shared = Arc::new(Shared { registry, status });
    let mut connections = JoinSet::new();
    loop {
        let stream = tokio::select! {
            () = cancel.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of file descriptors and the like: do not spin.
                    tracing::warn!(%error, "accepting an HTTP connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let shared = Arc::clone(&shared);
        let cancel = cancel.clone();
        connections.spawn(async move {
            let service = service_fn(move |request| {
                let shared = Arc::clone(&shared);
                async move { Ok::<_, Infallible>(respond(&request, &shared)) }
            });
            let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            let served = tokio::select! {
                served = connection.as_mut() => served,
                () = cancel.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(error) = served {
                tracing::debug!(%error, "HTTP connection ended with an error");
            }
        });
    }
    while connections.join_next().await.is_some() {}
    Ok(())
}

fn respond(request: &Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    if request.method() != Method::GET {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET is served\n".to_owned(),
        );
    }
    match request.uri().path() {
        "/" | "/status" => asset("text/html; charset=utf-8", page::HTML),
        "/status.js" => asset("text/javascript; charset=utf-8", page::SCRIPT),
        "/status.css" => asset("text/css; charset=utf-8", page::STYLE),
        "/status.json" => no_store(json(&shared.status.page())),
        "/metrics" => metrics(&shared.registry),
        "/healthz" => probe(&shared.status.health()),
        "/readyz" => probe(&shared.status.readiness()),
        "/debug/queues" => json(&shared.status.queues()),
        "/debug/runnables" => json(&shared.status.runnables()),
        "/debug/shards" => match shared.status.shards() {
            Some(report) => json(&report),
            None => text(StatusCode::NOT_FOUND, "sharding is off\n".to_owned()),
        },
        _ => text(StatusCode::NOT_FOUND, "not found\n".to_owned()),
    }
}

/// One of the status page's files, with headers that keep it to its own
/// files (see `page::CONTENT_SECURITY_POLICY`).
fn asset(content_type: &'static str, body: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    let headers = response.headers_mut();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    headers.insert(
        hyper::header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(page::CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        hyper::header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        hyper::header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// The page's data changes every second: never cached.
fn no_store(mut response: Response<Full<Bytes>>) -> Response<Full<Bytes>> {
    response.headers_mut().insert(
        hyper::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    response
}

fn json(value: &impl serde::Serialize) -> Response<Full<Bytes>> {
    match serde_json::to_string_pretty(value) {
        Ok(json) => with_type(StatusCode::OK, "application/json", json),
        Err(error) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n")),
    }
}

fn metrics(registry: &Registry) -> Response<Full<Bytes>> {
    let mut body = String::new();
    match prometheus_text::encode(&mut body, registry) {
        Ok(()) => with_type(StatusCode::OK, prometheus_text::CONTENT_TYPE, body),
        Err(error) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding metrics failed: {error}\n"),
        ),
    }
}

fn probe(probe: &Probe) -> Response<Full<Bytes>> {
    let status = if probe.ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    text(status, probe.text.clone())
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    with_type(status, "text/plain; charset=utf-8", body)
}

fn with_type(
    status: StatusCode,
    content_type: &'static str,
    body: String,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    // No response is to be read as anything but its type (a JSON body
    // holding markup from a key is never HTML).
    headers.insert(
        hyper::header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}
