//! A cursor over the structure of a JSON request body: object keys, list elements and the punctuation between
//! them. Each value is handed to serde_json, which checks it (UTF-8 included) and tells where it ends, so the
//! decoder can choose per key what to decode, what to keep as raw text and where a node list may be split.
//!
//! ```text
//!  {"Pod":{..},"Nodes":{"items":[{..},{..}]},"NodeNames":null}
//!   ^key  ^raw  ^key   ^enter ^key ^enter/next_element      ^end
//! ```
//!
//! Errors name the line and column in the whole body, also for errors serde_json found inside one value.

use std::borrow::Cow;

use serde::de::{DeserializeOwned, Error as _};
use serde_json::value::RawValue;

pub type Error = serde_json::Error;

#[derive(Clone)]
pub struct Walker<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Walker<'a> {
    pub fn new(text: &'a [u8]) -> Walker<'a> {
        Walker { text, at: 0 }
    }

    /// A walker at byte `at` of `text`.
    pub fn at_offset(text: &'a [u8], at: usize) -> Walker<'a> {
        Walker { text, at }
    }

    pub fn at(&self) -> usize {
        self.at
    }

    /// Moves the cursor to byte `at`, where another walk over the same text ended.
    pub fn seek(&mut self, at: usize) {
        self.at = at;
    }

    /// The next byte that is not whitespace, without moving past it.
    pub fn peek(&mut self) -> Option<u8> {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.text.get(self.at) {
            self.at += 1;
        }
        self.text.get(self.at).copied()
    }

    /// Moves past `open` (`{` or `[`) when it is the next byte, and says whether it was.
    pub fn enter(&mut self, open: u8) -> bool {
        let found = self.peek() == Some(open);
        self.at += usize::from(found);
        found
    }

    /// Moves past a `null` when it is the next value, and says whether it was.
    pub fn null(&mut self) -> bool {
        let found = self.peek() == Some(b'n') && self.text[self.at..].starts_with(b"null");
        self.at += if found { 4 } else { 0 };
        found
    }

    /// Inside an object (after `{`): the next key, with the cursor at its value; `None` after the closing `}`.
    /// `first` is true for the object's first key.
    pub fn next_key(&mut self, first: bool) -> Result<Option<Cow<'a, str>>, Error> {
        if !self.next_entry(first, b'}')? {
            return Ok(None);
        }
        if self.peek() != Some(b'"') {
            return Err(self.error("key must be a string"));
        }
        let start = self.at;
        let end = self.string_end()?;
        let quoted = &self.text[start..end];
        let inner = &quoted[1..quoted.len() - 1];
        let key = if inner.iter().any(|b| *b == b'\\' || *b < 0x20) {
            // Escapes (or a control character serde_json will name): rare, decoded the slow way.
            Cow::Owned(
                serde_json::from_slice::<String>(quoted).map_err(|e| self.relocate(e, start))?,
            )
        } else {
            Cow::Borrowed(
                std::str::from_utf8(inner).map_err(|_| self.error("invalid unicode code point"))?,
            )
        };
        self.at = end;
        if self.peek() != Some(b':') {
            return Err(self.error("expected `:`"));
        }
        self.at += 1;
        Ok(Some(key))
    }

    /// Inside a list (after `[`): whether another element follows (the cursor is then at it), or `false` after the
    /// closing `]`.
    pub fn next_element(&mut self, first: bool) -> Result<bool, Error> {
        self.next_entry(first, b']')
    }

    fn next_entry(&mut self, first: bool, close: u8) -> Result<bool, Error> {
        match self.peek() {
            Some(b) if b == close => {
                self.at += 1;
                Ok(false)
            }
            Some(b',') if !first => {
                self.at += 1;
                Ok(true)
            }
            Some(_) if first => Ok(true),
            Some(_) if close == b'}' => Err(self.error("expected `,` or `}`")),
            Some(_) => Err(self.error("expected `,` or `]`")),
            None if close == b'}' => Err(self.error("EOF while parsing an object")),
            None => Err(self.error("EOF while parsing a list")),
        }
    }

    /// Where the string starting at the cursor ends (after its closing quote); its content is not checked here.
    fn string_end(&self) -> Result<usize, Error> {
        let mut at = self.at + 1;
        loop {
            let rest = self.text.get(at..).unwrap_or_default();
            let Some(found) = memchr::memchr2(b'"', b'\\', rest) else {
                return Err(Walker::at_offset(self.text, self.text.len())
                    .error("EOF while parsing a string"));
            };
            at += found;
            if self.text[at] == b'"' {
                return Ok(at + 1);
            }
            // A backslash and the byte it escapes; `\u` hex digits hold neither a quote nor a backslash.
            at += 2;
        }
    }

    /// The value at the cursor, checked by serde_json and moved past; its text borrowed from the body.
    pub fn raw(&mut self) -> Result<&'a str, Error> {
        self.peek();
        let start = self.at;
        let rest = &self.text[start..];
        // NB: no `end()`: serde_json stops after this one value and leaves the rest to the walker.
        let raw = <&RawValue as serde::Deserialize>::deserialize(
            &mut serde_json::Deserializer::from_slice(rest),
        )
        .map_err(|e| self.relocate(e, start))?;
        let text = raw.get();
        // The raw text is a sub-slice of `rest`, starting at its first byte (whitespace was skipped above).
        let offset = (text.as_ptr() as usize).wrapping_sub(rest.as_ptr() as usize);
        self.at = start + offset + text.len();
        Ok(text)
    }

    /// The value at the cursor decoded as `T`, and moved past.
    pub fn value<T: DeserializeOwned>(&mut self) -> Result<T, Error> {
        let start = self.at;
        let text = self.raw()?;
        serde_json::from_str(text).map_err(|e| self.relocate(e, start))
    }

    /// Only whitespace may follow.
    pub fn end(&mut self) -> Result<(), Error> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(self.error("trailing characters")),
        }
    }

    /// An error at the cursor, with its line and column in the whole text.
    pub fn error(&self, what: &str) -> Error {
        let (line, column) = position(self.text, self.at);
        Error::custom(format!("{what} at line {line} column {column}"))
    }

    /// `err`, found by serde_json in the text starting at byte `start`, with its position made absolute.
    pub fn relocate(&self, err: Error, start: usize) -> Error {
        if err.line() == 0 {
            return err;
        }
        let message = err.to_string();
        let suffix = format!(" at line {} column {}", err.line(), err.column());
        let what = message.strip_suffix(&suffix).unwrap_or(&message);
        let (line, column) = position(self.text, start);
        let (line, column) = if err.line() == 1 {
            (line, column + err.column() - 1)
        } else {
            (line + err.line() - 1, err.column())
        };
        Error::custom(format!("{what} at line {line} column {column}"))
    }
}

/// Line and column (both from 1) of byte `at`; the column counts bytes, as serde_json's does.
fn position(text: &[u8], at: usize) -> (usize, usize) {
    let before = text.get(..at).unwrap_or(text);
    let line = 1 + before.iter().filter(|b| **b == b'\n').count();
    let line_start = before
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |p| p + 1);
    (line, at.min(text.len()) - line_start + 1)
}
