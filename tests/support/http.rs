//! Test helpers for the manager's HTTP endpoints: a minimal HTTP/1.1 GET over
//! real loopback TCP, and a parser for the Prometheus text exposition format.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A response: status code, `Content-Type`, every header and the body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    /// The value of header `name` (any case), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(header, _)| header.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// `GET path` on `address`, with `Connection: close`; fails after 5 s.
pub async fn get(address: SocketAddr, path: &str) -> Response {
    tokio::time::timeout(Duration::from_secs(5), get_inner(address, path))
        .await
        .unwrap_or_else(|_| panic!("GET {path} did not answer within 5 s"))
}

async fn get_inner(address: SocketAddr, path: &str) -> Response {
    let mut stream = TcpStream::connect(address)
        .await
        .expect("connect to the manager");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send the request");
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .await
        .expect("read the response");
    let raw = String::from_utf8(raw).expect("a UTF-8 response");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a response head");
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .expect("a status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.to_owned(), value.trim().to_owned()))
        .collect();
    let content_type = headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("content-type"))
        .map(|(_, value)| value.clone())
        .unwrap_or_default();
    Response {
        status,
        content_type,
        headers,
        body: body.to_owned(),
    }
}

/// One sample of the exposition: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed exposition: samples plus each family's declared type.
#[derive(Debug, Default)]
pub struct Exposition {
    pub samples: Vec<Sample>,
    pub types: BTreeMap<String, String>,
}

impl Exposition {
    /// Parses the Prometheus text format (0.0.4), panicking on a malformed
    /// line.
    pub fn parse(text: &str) -> Self {
        let mut exposition = Self::default();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            if let Some(comment) = line.strip_prefix('#') {
                let mut words = comment.split_whitespace();
                if words.next() == Some("TYPE") {
                    let name = words.next().expect("a TYPE name").to_owned();
                    let kind = words.next().expect("a TYPE kind").to_owned();
                    exposition.types.insert(name, kind);
                }
                continue;
            }
            let sample = parse_sample(line)
                .unwrap_or_else(|why| panic!("line {}: {why}: {line}", number + 1));
            exposition.samples.push(sample);
        }
        exposition
    }

    /// The value of the one sample named `name` with exactly `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let wanted: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let mut found = self
            .samples
            .iter()
            .filter(|s| s.name == name && s.labels == wanted);
        let first = found.next()?;
        assert!(found.next().is_none(), "two samples {name}{wanted:?}");
        Some(first.value)
    }

    /// Every label set of the samples named `name`.
    pub fn label_sets(&self, name: &str) -> Vec<BTreeMap<String, String>> {
        self.samples
            .iter()
            .filter(|s| s.name == name)
            .map(|s| s.labels.clone())
            .collect()
    }
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .ok_or("no value")?;
    let name = &line[..name_end];
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    {
        return Err(format!("bad metric name `{name}`"));
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = parse_labels(after, &mut labels)?;
    }
    let value = rest.split_whitespace().next().ok_or("no value")?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse().map_err(|_| format!("bad value `{v}`"))?,
    };
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// Parses `key="value",…}` and returns what follows the brace.
fn parse_labels<'a>(
    mut rest: &'a str,
    labels: &mut BTreeMap<String, String>,
) -> Result<&'a str, String> {
    loop {
        rest = rest.trim_start_matches(',').trim_start();
        if let Some(after) = rest.strip_prefix('}') {
            return Ok(after);
        }
        let (key, after) = rest.split_once("=\"").ok_or("bad label")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next().ok_or("unterminated label value")? {
                (i, '"') => break i,
                (_, '\\') => match chars.next().ok_or("bad escape")?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        if labels.insert(key.trim().to_owned(), value).is_some() {
            return Err(format!("label `{key}` repeated"));
        }
        rest = &after[end + 1..];
    }
}
