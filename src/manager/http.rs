//! The manager's HTTP server: `/metrics`, `/healthz`, `/readyz`,
//! `/debug/queues` and `/debug/shards` (feature `http`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
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
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    response
}
