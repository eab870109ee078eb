//! What the property tests that feed decoders of outside data random and
//! mutated bytes share (tests named `bad_bytes_*`): how many cases, and
//! the mutations of a valid input.
//!
//! `TEND_FUZZ_CASES` sets the cases per test (default 256, for CI); a
//! release run with more, `TEND_FUZZ_CASES=100000 cargo test --release
//! --all-features --lib bad_bytes`, gives a million over all of them.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::Config;

/// The runner's settings: the cases of `TEND_FUZZ_CASES`, nothing saved
/// (a failure prints its input; the mutations make it reproducible).
pub(crate) fn config() -> Config {
    let cases = std::env::var("TEND_FUZZ_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(256);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

/// One change to a byte string.
#[derive(Debug, Clone)]
enum Edit {
    Replace(Index, u8),
    Insert(Index, u8),
    Remove(Index),
    Cut(Index),
    /// A copy of one stretch of the input written over another: a field
    /// moved, a brace duplicated.
    Splice(Index, Index, Index),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        4 => (any::<Index>(), any::<u8>()).prop_map(|(at, b)| Edit::Replace(at, b)),
        2 => (any::<Index>(), any::<u8>()).prop_map(|(at, b)| Edit::Insert(at, b)),
        2 => any::<Index>().prop_map(Edit::Remove),
        1 => any::<Index>().prop_map(Edit::Cut),
        1 => (any::<Index>(), any::<Index>(), any::<Index>()).prop_map(|(a, b, c)| Edit::Splice(a, b, c)),
    ]
}

fn apply(bytes: &mut Vec<u8>, edit: &Edit) {
    if bytes.is_empty() {
        if let Edit::Insert(_, b) = edit {
            bytes.push(*b);
        }
        return;
    }
    let len = bytes.len();
    match edit {
        Edit::Replace(at, b) => bytes[at.index(len)] = *b,
        Edit::Insert(at, b) => bytes.insert(at.index(len + 1), *b),
        Edit::Remove(at) => drop(bytes.remove(at.index(len))),
        Edit::Cut(at) => bytes.truncate(at.index(len)),
        Edit::Splice(from, to, at) => {
            let (a, b) = (from.index(len), to.index(len));
            let stretch = bytes[a.min(b)..a.max(b)].to_vec();
            let at = at.index(len);
            bytes.splice(at..(at + stretch.len()).min(len), stretch);
        }
    }
}

/// Random bytes, or one of `valid` with one to eight edits.
pub(crate) fn bytes_near(valid: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    let mutated = (any::<Index>(), vec(edit(), 1..8)).prop_map(move |(which, edits)| {
        let mut bytes = which.get(&valid).clone();
        for edit in &edits {
            apply(&mut bytes, edit);
        }
        bytes
    });
    prop_oneof![1 => vec(any::<u8>(), 0..512), 3 => mutated]
}

/// As [`bytes_near`], as text (invalid UTF-8 replaced): for decoders of
/// strings.
pub(crate) fn text_near(valid: &[&str]) -> impl Strategy<Value = String> {
    let valid = valid.iter().map(|s| s.as_bytes().to_vec()).collect();
    bytes_near(valid).prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
}
