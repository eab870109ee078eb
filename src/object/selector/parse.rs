//! Kubernetes' label selector syntax, read as its parser reads it: a
//! lexer (identifiers end at whitespace or one of `=!(),<>`), then one
//! requirement per comma, then keys and values checked as the API server
//! checks them (qualified names, label values, their lengths).

use std::collections::BTreeSet;
use std::iter::Peekable;
use std::vec::IntoIter;

use super::Test;

/// One token of a selector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token<'a> {
    /// A key, a value, or `in` / `notin` (which only the position tells).
    Word(&'a str),
    Not,
    Equal,
    DoubleEqual,
    NotEqual,
    Greater,
    Less,
    Open,
    Close,
    Comma,
}

type Tokens<'a> = Peekable<IntoIter<Token<'a>>>;

/// The requirements of `selector`, in order; none for a blank one.
pub(super) fn requirements(selector: &str) -> Result<Vec<(String, Test)>, String> {
    let mut tokens = lex(selector).into_iter().peekable();
    let mut parsed = Vec::new();
    if tokens.peek().is_none() {
        return Ok(parsed);
    }
    loop {
        parsed.push(requirement(&mut tokens)?);
        match tokens.next() {
            None => return Ok(parsed),
            Some(Token::Comma) => {}
            Some(other) => {
                return Err(format!(
                    "{} after a requirement, where `,` or the end belongs",
                    shown(other)
                ));
            }
        }
    }
}

fn lex(selector: &str) -> Vec<Token<'_>> {
    let mut tokens = Vec::new();
    let mut rest = selector.trim_start();
    while let Some(c) = rest.chars().next() {
        let (token, len) = match c {
            '!' if rest.starts_with("!=") => (Token::NotEqual, 2),
            '!' => (Token::Not, 1),
            '=' if rest.starts_with("==") => (Token::DoubleEqual, 2),
            '=' => (Token::Equal, 1),
            '>' => (Token::Greater, 1),
            '<' => (Token::Less, 1),
            '(' => (Token::Open, 1),
            ')' => (Token::Close, 1),
            ',' => (Token::Comma, 1),
            _ => {
                let len = rest
                    .find(|c: char| c.is_whitespace() || "=!(),<>".contains(c))
                    .unwrap_or(rest.len());
                (Token::Word(&rest[..len]), len)
            }
        };
        tokens.push(token);
        rest = rest[len..].trim_start();
    }
    tokens
}

/// `!key`, `key`, `key=value` (`==`), `key!=value`, `key>n`, `key<n`,
/// `key in (..)`, `key notin (..)`.
fn requirement(tokens: &mut Tokens<'_>) -> Result<(String, Test), String> {
    let first = tokens.next();
    if first == Some(Token::Not) {
        let key = key(tokens.next())?;
        return Ok((key, Test::DoesNotExist));
    }
    let key = key(first)?;
    let test = match tokens.peek().copied() {
        None | Some(Token::Comma) => Test::Exists,
        Some(Token::Equal | Token::DoubleEqual) => {
            Test::In(BTreeSet::from([exact_value(advanced(tokens))?]))
        }
        Some(Token::NotEqual) => Test::NotIn(BTreeSet::from([exact_value(advanced(tokens))?])),
        Some(Token::Greater) => Test::Greater(number(advanced(tokens).next())?),
        Some(Token::Less) => Test::Less(number(advanced(tokens).next())?),
        Some(Token::Word("in")) => Test::In(set(advanced(tokens))?),
        Some(Token::Word("notin")) => Test::NotIn(set(advanced(tokens))?),
        Some(other) => {
            return Err(format!(
                "{} after key {key:?}, where an operator belongs",
                shown(other)
            ));
        }
    };
    Ok((key, test))
}

/// `tokens` past the one peeked.
fn advanced<'t, 'a>(tokens: &'t mut Tokens<'a>) -> &'t mut Tokens<'a> {
    tokens.next();
    tokens
}

fn key(token: Option<Token<'_>>) -> Result<String, String> {
    match token {
        Some(Token::Word(word)) if word != "in" && word != "notin" => {
            checked_key(word)?;
            Ok(word.to_owned())
        }
        Some(other) => Err(format!("{}, where a key belongs", shown(other))),
        None => Err("the end, where a key belongs".to_owned()),
    }
}

/// The value after `=`, `==` or `!=`: empty when none follows.
fn exact_value(tokens: &mut Tokens<'_>) -> Result<String, String> {
    match tokens.peek().copied() {
        None | Some(Token::Comma) => Ok(String::new()),
        Some(Token::Word(word)) => {
            tokens.next();
            checked_value(word)?;
            Ok(word.to_owned())
        }
        Some(other) => Err(format!("{}, where a value belongs", shown(other))),
    }
}

/// The integer after `>` or `<`.
fn number(token: Option<Token<'_>>) -> Result<i64, String> {
    match token {
        Some(Token::Word(word)) => word
            .parse()
            .map_err(|_| format!("{word:?} after `>` or `<` is not a 64-bit integer")),
        Some(other) => Err(format!("{}, where an integer belongs", shown(other))),
        None => Err("the end, where an integer belongs".to_owned()),
    }
}

/// `( a, b )`: the values, an empty slot standing for the empty value
/// (`()` is the set of it alone), as Kubernetes reads them.
fn set(tokens: &mut Tokens<'_>) -> Result<BTreeSet<String>, String> {
    if tokens.next() != Some(Token::Open) {
        return Err("a set of values must be in `( )`".to_owned());
    }
    let mut values = BTreeSet::new();
    let mut slot: Option<&str> = None;
    loop {
        match tokens.next() {
            Some(Token::Word(word)) if slot.is_none() => slot = Some(word),
            Some(token @ (Token::Comma | Token::Close)) => {
                let value = slot.take().unwrap_or("");
                checked_value(value)?;
                values.insert(value.to_owned());
                if token == Token::Close {
                    return Ok(values);
                }
            }
            Some(other) => {
                return Err(format!(
                    "{} in a set, where `,` or `)` belongs",
                    shown(other)
                ));
            }
            None => return Err("a `(` without its `)`".to_owned()),
        }
    }
}

/// A qualified name, as a label key must be: `name` or `prefix/name`, the
/// prefix a DNS subdomain of at most 253 characters.
fn checked_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let labels_ok = prefix.split('.').all(|label| {
            let inner = label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            inner && !label.starts_with('-') && !label.ends_with('-') && !label.is_empty()
        });
        if prefix.len() > 253 || !labels_ok {
            return Err(format!(
                "the prefix of key {key:?} is not a DNS subdomain (lower case, at most 253 characters)"
            ));
        }
    }
    if name.is_empty() || !is_label_value(name) {
        return Err(format!(
            "key {key:?} is not a qualified name (at most 63 letters, digits, `-_.`, and an optional `prefix/`, beginning and ending alphanumeric)"
        ));
    }
    Ok(())
}

fn checked_value(value: &str) -> Result<(), String> {
    if is_label_value(value) {
        Ok(())
    } else {
        Err(format!(
            "{value:?} is not a label value (at most 63 letters, digits and `-_.`, beginning and ending alphanumeric)"
        ))
    }
}

/// Empty, or at most 63 of `[A-Za-z0-9-_.]` beginning and ending with a
/// letter or digit.
fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    let edges = |b: Option<&u8>| b.is_none_or(u8::is_ascii_alphanumeric);
    value.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(b))
        && edges(bytes.first())
        && edges(bytes.last())
}

fn shown(token: Token<'_>) -> String {
    let symbol = match token {
        Token::Word(word) => return format!("{word:?}"),
        Token::Not => "!",
        Token::Equal => "=",
        Token::DoubleEqual => "==",
        Token::NotEqual => "!=",
        Token::Greater => ">",
        Token::Less => "<",
        Token::Open => "(",
        Token::Close => ")",
        Token::Comma => ",",
    };
    format!("`{symbol}`")
}
